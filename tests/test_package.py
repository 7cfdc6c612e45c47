import ast
import importlib.metadata
import sys
from pathlib import Path

import hami
from hami.core import annotations, devices


def test_version_is_pep440() -> None:
    major, minor, patch = hami.__version__.split(".")
    assert all(part.isdigit() for part in (major, minor, patch))


def test_device_defaults_match_go_zero_values() -> None:
    dev = devices.DeviceInfo(id="GPU-0")
    assert (dev.index, dev.count, dev.devmem, dev.numa, dev.health) == (0, 0, 0, 0, False)
    assert annotations.NODE_REGISTER == "hami.io/node-nvidia-register"


# ---- what test modules and benchmarks may import ----

ROOT = Path(__file__).resolve().parents[1]
# Top-level names a checkout puts on sys.path beside the package (pytest's pythonpath has ".").
CHECKOUT_TOP_LEVEL = frozenset(
    p.stem for p in ROOT.iterdir() if p.name != "src" and not p.name.startswith(".")
)
THIRD_PARTY = frozenset(importlib.metadata.packages_distributions()) - {"hami"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def import_problems(
    source: str, *, bench: bool, test_modules: frozenset[str] = frozenset(), own: frozenset[str] = frozenset()
) -> list[str]:
    """Imports a test module (``tests``) or a benchmark (``bench``) may not make.

    Tests: another test module (``tests.``, ``bench.``, a relative import, or a module of tests/ by its
    bare name), except ``own``: the helper modules of the test's own folder (fixtures only that folder
    uses live there, not in hami.testing). Benchmarks: anything but ``hami``, the standard library and
    installed distributions, and any private (``_x``) module, name or attribute of ``hami``.
    """
    problems: list[str] = []
    hami_names: set[str] = set()  # local names bound to hami modules or objects

    def check_module(module: str, line: int) -> None:
        top = module.split(".", maxsplit=1)[0]
        if module in own:
            return
        if top in ("tests", "bench") or top in test_modules:
            problems.append(f"line {line}: imports {module}, a test or benchmark module")
        elif bench and top != "hami" and (
            top in CHECKOUT_TOP_LEVEL or (top not in sys.stdlib_module_names and top not in THIRD_PARTY)
        ):
            problems.append(f"line {line}: imports {module}: not hami, the standard library or a package")
        elif bench and top == "hami" and any(_private(part) for part in module.split(".")):
            problems.append(f"line {line}: imports {module}, a private module of hami")

    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check_module(alias.name, node.lineno)
                if alias.name.split(".")[0] == "hami":
                    hami_names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                problems.append(f"line {node.lineno}: relative import")
                continue
            module = node.module or ""
            check_module(module, node.lineno)
            if module.split(".")[0] == "hami":
                for alias in node.names:
                    if bench and _private(alias.name):
                        problems.append(f"line {node.lineno}: imports {alias.name}, private in {module}")
                    hami_names.add(alias.asname or alias.name)
    if bench:
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            root: ast.expr = node
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in hami_names:
                problems.append(f"line {node.lineno}: uses {ast.unparse(node)}, private in hami")
    return problems


def test_import_rules_catch_what_they_forbid() -> None:
    tests = "tests"  # spelled apart so that a grep for test-to-test imports finds none here
    assert import_problems(f"from {tests}.scheduler import x\n", bench=False)
    assert import_problems(f"import {tests}.core.certs\n", bench=False)
    assert import_problems("import bench.bench_extender\n", bench=False)
    assert import_problems("from . import helpers\n", bench=False)
    assert import_problems("import extender_env\n", bench=False, test_modules=frozenset({"extender_env"}))
    own = frozenset({"tests.doctor.seeded"})
    assert import_problems("from tests.doctor.seeded import x\n", bench=False, own=own) == []
    assert import_problems("from tests.scheduler.seeded import x\n", bench=False, own=own)
    assert import_problems("from tests.doctor.test_x import x\n", bench=False, own=own)
    assert import_problems("from hami.testing.kubeapi.server import _Handler\n", bench=True)
    assert import_problems("import hami.core._private\n", bench=True)
    assert import_problems("from hami.testing import kubeapi\nkubeapi._x = 1\n", bench=True)
    assert import_problems("import hami.testing\nhami.testing._y()\n", bench=False) == []
    assert import_problems("import hami\nhami._version\n", bench=True)
    assert import_problems("import alerts.generate\n", bench=True)
    assert import_problems("import not_installed_anywhere\n", bench=True)
    assert import_problems("import hami.testing\nhami.testing._y()\n", bench=True)
    allowed = (
        "import json\nimport requests\nfrom hami.testing.builders import gpu_pod\n"
        "import hami.testing.kubeapi.__main__\nhami.testing.kubeapi.__main__.main()\n"
    )
    assert import_problems(allowed, bench=True) == []


def helpers_of(folder: Path) -> frozenset[str]:
    """The dotted names of a test folder's helper modules (and packages): below it, neither a test
    module nor a conftest."""
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        if path.stem.startswith("test_") or path.stem == "conftest" or path.parent == ROOT / "tests":
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.add(".".join(parts[:-1] if path.stem == "__init__" else parts))
    return frozenset(names)


def test_test_modules_import_no_other_test_module() -> None:
    files = sorted(ROOT.glob("tests/**/*.py"))
    modules = frozenset(p.stem for p in files) - {"__init__"}
    folders = {path.relative_to(ROOT).parts[:2] for path in files}
    own = {folder: helpers_of(ROOT.joinpath(*folder)) for folder in folders}
    problems = [
        f"{path.relative_to(ROOT)} {problem}"
        for path in files
        for problem in import_problems(
            path.read_text(encoding="utf-8"), bench=False, test_modules=modules,
            own=own[path.relative_to(ROOT).parts[:2]],
        )
    ]
    assert problems == [], "shared test support belongs in hami.testing:\n" + "\n".join(problems)


def test_benchmarks_import_only_hami_and_packages() -> None:
    files = sorted(ROOT.glob("bench/*.py"))
    assert files
    problems = [
        f"{path.relative_to(ROOT)} {problem}"
        for path in files
        for problem in import_problems(path.read_text(encoding="utf-8"), bench=True)
    ]
    assert problems == [], "\n".join(problems)
