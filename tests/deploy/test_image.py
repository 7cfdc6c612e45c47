"""The Dockerfile: its build context holds what it copies, and its two pip steps, replayed here on
exactly those files, give an installed package whose every console script starts.

No Docker daemon is needed: the wheel stage's ``pip wheel`` runs offline on a copy of the files the
stage copies, and the result is installed apart from the source tree.
"""

from __future__ import annotations

import fnmatch
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hami.core import thresholds
from tests.deploy import manifests as m

DOCKERFILE = m.ROOT / "Dockerfile"


@dataclass(frozen=True)
class Instruction:
    stage: int
    op: str
    args: str


def pyproject() -> dict[str, Any]:
    return tomllib.loads((m.ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def instructions() -> list[Instruction]:
    """Dockerfile instructions with line continuations joined and comments dropped."""
    out: list[Instruction] = []
    stage = -1
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        op, _, args = (pending + line).partition(" ")
        pending = ""
        if op.upper() == "FROM":
            stage += 1
        out.append(Instruction(stage, op.upper(), args.strip()))
    return out


def stage_of(*, final: bool) -> list[Instruction]:
    every = instructions()
    last = max(i.stage for i in every)
    return [i for i in every if i.stage == (last if final else 0)]


def copied_sources() -> list[str]:
    """The build-context paths the wheel stage copies."""
    sources: list[str] = []
    for ins in stage_of(final=False):
        if ins.op == "COPY" and not ins.args.startswith("--from"):
            *srcs, _dest = shlex.split(ins.args)
            sources.extend(s.rstrip("/") for s in srcs)
    return sources


def ignored(path: str, rules: list[str]) -> bool:
    """Docker's .dockerignore matching: the last rule that matches wins."""
    verdict = False
    for rule in rules:
        negate = rule.startswith("!")
        pattern = rule.removeprefix("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path, pattern.removeprefix("**/")):
            verdict = not negate
    return verdict


def dockerignore() -> list[str]:
    lines = (m.ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_its_python_meets_requires_python() -> None:
    (arg,) = [i.args for i in instructions() if i.op == "ARG" and i.args.startswith("PYTHON_IMAGE=")]
    version = arg.split(":", 1)[1].split("-", 1)[0]
    major, minor = (int(part) for part in version.split("."))
    floor = pyproject()["project"]["requires-python"].removeprefix(">=")
    assert (major, minor) >= tuple(int(part) for part in floor.split("."))


def test_deploy_runs_this_image_and_the_runbook_links_point_into_its_repository() -> None:
    repository = pyproject()["project"]["urls"]["Repository"]
    image = "ghcr.io/" + repository.removeprefix("https://github.com/")
    version = pyproject()["project"]["version"]
    images = {c.spec["image"] for c in m.containers() if not c.spec["image"].startswith("registry.k8s.io/")}
    assert images == {f"{image}:{version}"}  # the chart's appVersion is the package's version
    assert f"docker build -t {image}:" in DOCKERFILE.read_text(encoding="utf-8")
    config = thresholds.load()
    assert config["runbook_base_url"] == f"{repository}/blob/main/docs/runbooks"


def test_every_copied_path_exists_and_passes_dockerignore() -> None:
    rules = dockerignore()
    sources = copied_sources()
    assert {"pyproject.toml", "src"} <= set(sources)
    for source in sources:
        assert (m.ROOT / source).exists(), source
        assert not ignored(source, rules), f"{source} is excluded from the build context"
    assert ignored("tests", rules) and ignored(".venv", rules)  # the context stays small
    assert ignored("src/hami/__pycache__", rules)


def test_the_final_stage_installs_only_the_built_wheels() -> None:
    final = stage_of(final=True)
    (install,) = [i.args for i in final if i.op == "RUN" and "pip install" in i.args]
    assert "--no-index" in install and "--find-links=/wheels" in install
    assert any(i.op == "COPY" and i.args.startswith("--from=wheels /wheels") for i in final)


@pytest.mark.slow
def test_the_wheel_built_from_the_copied_files_gives_working_console_scripts(tmp_path: Path) -> None:
    context = tmp_path / "context"
    context.mkdir()
    for source in copied_sources():
        src = m.ROOT / source
        if src.is_dir():
            shutil.copytree(src, context / source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(src, context / source)
    wheels = tmp_path / "wheels"
    # The image's `pip wheel .`, offline: the dependencies come from this environment instead.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(wheels), "."],
        cwd=context, check=True, timeout=240,
    )
    (wheel,) = wheels.glob("hami-*.whl")
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    readme = (m.ROOT / "README.md").read_text(encoding="utf-8")
    assert next(line for line in readme.splitlines() if len(line) > 40) in metadata  # it was copied
    assert "hami/deviceplugin/api/deviceplugin.proto" in names
    assert "hami/py.typed" in names
    # the demo and the test support run from a checkout only (docs/design/packaging.md)
    assert not [n for n in names if n.startswith(("hami/demo/", "hami/testing/"))]
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True, timeout=240,
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    where = subprocess.run(
        [sys.executable, "-c", "import hami; print(hami.__file__)"],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )
    assert Path(where.stdout.strip()).is_relative_to(site)  # not the source tree
    for script in pyproject()["project"]["scripts"]:
        path = site / "bin" / script
        assert path.is_file(), script
        run = subprocess.run(
            [sys.executable, str(path), "--help"],
            env=env, capture_output=True, text=True, check=False, timeout=120,
        )
        assert run.returncode == 0, (script, run.stderr[-2000:])
        assert "usage:" in run.stdout, script
