"""docs/metrics.md is generated from the code and stays so; the code exports every family the
metrics contract requires, per component, with the contract's labels."""

import re
from pathlib import Path

import pytest
from scripts import gen_metrics_doc as gen

from hami.core.serve.describe import MetricDescriptor

CONTRACT = Path(__file__).resolve().parents[2] / "docs/design/metrics-contract.md"
SECTIONS = {"Monitor (": 0, "Scheduler extender (": 1, "Device plugin (": 2}
_TOKEN = re.compile(r"`([^`]+)`")
_FAMILY = re.compile(r"^((?:hami|rest_client)_[a-z_]+)(?:\{([^}]*)\})?$")


def required(text: str) -> dict[int, dict[str, set[str]]]:
    """Component index -> family -> labels the contract names ("..." means "and others")."""
    out: dict[int, dict[str, set[str]]] = {0: {}, 1: {}, 2: {}}
    section: int | None = None
    for line in text.splitlines():
        if line.startswith("## ") and not line.startswith("## Required"):
            section = None
        for head, index in SECTIONS.items():
            if line.startswith(head):
                section = index
        if section is None:
            continue
        for token in _TOKEN.findall(line):
            m = _FAMILY.match(token)
            if m:
                labels = {x.strip() for x in (m.group(2) or "").split(",")} - {"", "..."}
                out[section].setdefault(m.group(1), set()).update(labels)
    # rule 2's tuning-guide names (monitor) and rule 6's build info (everyone)
    for name in (
        "hami_vgpu_memory_used_bytes",
        "hami_vgpu_memory_limit_bytes",
        "hami_vgpu_core_used_percent",
        "hami_vgpu_core_limit_percent",
    ):
        out[0].setdefault(name, set())
    for families in out.values():
        families.setdefault("hami_build_info", {"component"})
    return out


def described(index: int) -> dict[str, MetricDescriptor]:
    return {d.name: d for d in gen.COMPONENTS[index][2](False)}


def test_doc_is_generated_from_the_code() -> None:
    assert gen.DOC.read_text(encoding="utf-8") == gen.render(), "run: python scripts/gen_metrics_doc.py"
    assert gen.main(["--check"]) == 0


def test_check_fails_on_drift(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "metrics.md"
    stale.write_text(gen.render().replace("hami_vgpu_processes", "hami_vgpu_procs"), encoding="utf-8")
    monkeypatch.setattr(gen, "DOC", stale)
    assert gen.main(["--check"]) == 1


def test_units_call_out_hami_percent_ratios() -> None:
    doc = gen.DOC.read_text(encoding="utf-8")
    row = next(line for line in doc.splitlines() if line.startswith("| `hami_gpu_core_allocated_ratio`"))
    assert "0–100" in row
    row = next(
        line for line in doc.splitlines() if line.startswith("| `hami_node_gpu_memory_allocated_ratio`")
    )
    assert "ratio, 0–1" in row
    legacy = doc.index("### Legacy names")
    assert doc.index("`HostGPUMemoryUsage`") > legacy
    assert "`vGPU_device_memory_usage_in_bytes`" not in doc[:legacy]


def test_contract_parser_sees_every_section() -> None:
    text = CONTRACT.read_text(encoding="utf-8") if CONTRACT.exists() else ""
    if not text:
        pytest.skip(f"{CONTRACT} not present")
    req = required(text)
    assert req[0]["hami_host_gpu_ecc_errors_total"] == {"error_type"}
    assert "hami_scheduler_nodes" in req[1] and "rest_client_requests_total" in req[1]
    assert req[2]["hami_deviceplugin_health_events_total"] == {"device_uuid", "event"}


@pytest.mark.parametrize("index", [0, 1, 2], ids=["monitor", "scheduler", "device-plugin"])
def test_code_exports_what_the_contract_requires(index: int) -> None:
    if not CONTRACT.exists():
        pytest.skip(f"{CONTRACT} not present")
    have = described(index)
    problems = []
    for name, labels in sorted(required(CONTRACT.read_text(encoding="utf-8"))[index].items()):
        if name not in have:
            problems.append(f"{name}: missing")
        elif not labels <= set(have[name].labels):
            problems.append(f"{name}: labels {sorted(labels - set(have[name].labels))} missing")
    assert problems == []


# A family's own series: a histogram's or summary's parts, a counter's `_created`.
_SERIES_SUFFIXES = ("_bucket", "_sum", "_count", "_created")
_NAME = re.compile(r"(?<![\w:])((?:hami|rest_client)_[a-z_]+[a-z])(?![\w:(])")


def exported() -> set[str]:
    """Every family any daemon exports, legacy names included, with its series' names."""
    names = {d.name for _t, _p, describe in gen.COMPONENTS for old in (False, True) for d in describe(old)}
    return names | {n + s for n in names for s in _SERIES_SUFFIXES}


def contract_names(text: str) -> set[str]:
    """The metric names in the contract's code spans (recording rules, `a:b:c`, are not families)."""
    return {name for span in _TOKEN.findall(text) for name in _NAME.findall(span)}


def test_every_family_the_contract_names_is_exported() -> None:
    """Anywhere on the page, not only in the required lists: a renamed family fails here until the
    contract says the new name (it once named `hami_gpu_split_count` after the code had moved on)."""
    names = contract_names(CONTRACT.read_text(encoding="utf-8"))
    assert {"hami_gpu_split_limit", "hami_gpu_shared_count", "rest_client_requests_total"} <= names
    assert sorted(names - exported()) == []


def test_a_family_no_daemon_exports_is_caught() -> None:
    text = CONTRACT.read_text(encoding="utf-8").replace("hami_gpu_split_limit", "hami_gpu_split_count")
    assert "hami_gpu_split_count" in contract_names(text) - exported()
