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
    assert gen.DOC.read_text() == gen.render(), "run: python scripts/gen_metrics_doc.py"
    assert gen.main(["--check"]) == 0


def test_check_fails_on_drift(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "metrics.md"
    stale.write_text(gen.render().replace("hami_vgpu_processes", "hami_vgpu_procs"))
    monkeypatch.setattr(gen, "DOC", stale)
    assert gen.main(["--check"]) == 1


def test_units_call_out_hami_percent_ratios() -> None:
    doc = gen.DOC.read_text()
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
    text = CONTRACT.read_text() if CONTRACT.exists() else ""
    if not text:
        pytest.skip(f"{CONTRACT} not present")
    req = required(text)
    assert req[0]["hami_host_gpu_ecc_errors_total"] == {"error_type"}
    assert "hami_scheduler_nodes" in req[1] and "rest_client_requests_total" in req[1]
    assert req[2]["hami_deviceplugin_health_events_total"] == {"device_uuid", "event"}


# The renames the contract invites: a `_count` suffix reads as a histogram's to promtool.
RENAMED = {
    "hami_gpu_split_count": "hami_gpu_split_limit",
    "hami_device_split_count": "hami_device_split_limit",
}


@pytest.mark.parametrize("index", [0, 1, 2], ids=["monitor", "scheduler", "device-plugin"])
def test_code_exports_what_the_contract_requires(index: int) -> None:
    if not CONTRACT.exists():
        pytest.skip(f"{CONTRACT} not present")
    have = described(index)
    problems = []
    for contract_name, labels in sorted(required(CONTRACT.read_text())[index].items()):
        name = RENAMED.get(contract_name, contract_name)
        if name not in have:
            problems.append(f"{name}: missing")
        elif not labels <= set(have[name].labels):
            problems.append(f"{name}: labels {sorted(labels - set(have[name].labels))} missing")
    assert problems == []
