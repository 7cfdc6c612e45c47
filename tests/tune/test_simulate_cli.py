"""``hami-tune simulate``: the snapshot file (round trip, every bad field one clear line, exit 2)
and the three outputs (table, --json, --html)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hami.core.snapshot import model as snap
from hami.core.snapshot import reader as snapread
from hami.core.snapshot import writer as snapwrite
from hami.testing.whatif import T0, node, pod, snapshot
from hami.tune.main import main

SNAPSHOT = snapshot(
    [node("n1", 8000, 8000, count=2), node("n2", 12000, scaling=1.5)],
    [
        pod("a", 0, mem=6000, until=600, placed=("n1", ["n1-gpu1"])),
        pod("b", 10, mem=6000, placed=("n1", ["n1-gpu0"])),
        pod("c", 20, mem=6000, placed=("n2", ["n2-gpu0"])),
        pod("d", 30, mem=7000, scheduled=600, placed=("n1", ["n1-gpu1"])),
        pod("e", 40, mem=9000),
    ],
    quotas=[snap.Quota("default", "gpu", {"limits.nvidia.com/gpumem": "100000"})],
    locks=[snap.Lock("n2", T0 + 50, "x/y", T0 + 70)],
)


@pytest.fixture
def snapshot_file(tmp_path: Path) -> Path:
    path = tmp_path / "snap.json"
    snapwrite.save_snapshot(SNAPSHOT, path)
    return path


def test_a_snapshot_survives_the_file() -> None:
    assert snapread.loads(snapwrite.dumps(SNAPSHOT)) == SNAPSHOT


def _document() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(snapwrite.dumps(SNAPSHOT))
    return doc


def _break(path: str, value: Any) -> dict[str, Any]:
    doc = _document()
    *parents, last = path.split("/")
    target: Any = doc
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if value is KeyError:
        del target[last]
    else:
        target[int(last) if isinstance(target, list) else last] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("kind", "Pod", "kind: expected 'HAMiSchedulingSnapshot', got 'Pod' (not a snapshot file)"),
        ("version", 4, "version: 4 is newer than this tool reads (3); upgrade hami"),
        ("version", 0, "version: 0 is not a snapshot version this tool reads (1 to 3)"),
        ("source", "guess", "source: expected one of api, prometheus, generated, got 'guess'"),
        ("taken", "yesterday", "taken: not an RFC 3339 time (e.g. 2025-06-01T12:00:00Z): 'yesterday'"),
        ("nodes", KeyError, "nodes: required"),
        ("nodes/0/annotations", {}, "nodes[0].annotations: no hami.io/node-nvidia-register"),
        ("nodes/1/name", "n1", "nodes[1].name: 'n1' appears twice"),
        ("nodes/0/deviceMemoryScaling", 0, "nodes[0].deviceMemoryScaling: must be greater than 0, got 0"),
        ("nodes/0/allocatableGPUs", -1, "nodes[0].allocatableGPUs: expected a non-negative integer, got -1"),
        ("nodes/0/colour", "red", "nodes[0]: unknown field 'colour' (known: name, annotations"),
        ("pods/0", [], "pods[0]: expected an object, got a list"),
        ("pods/1/uid", "uid-default-a", "pods[1].uid: 'uid-default-a' appears twice"),
        ("pods/0/containers", [], "pods[0].containers: a pod needs at least one container"),
        (
            "pods/0/containers/0/resources/limits",
            {"nvidia.com/gpu": True},
            "pods[0].containers[0].resources.limits.nvidia.com/gpu: expected a quantity string",
        ),
        ("pods/0/finished", "2000-01-01T00:00:00Z", "pods[0].finished: before the pod was created"),
        ("pods/0/allocation", None, "pods[0].allocation: required when 'scheduled' is set"),
        ("pods/0/allocation/node", "n9", "pods[0].allocation.node: 'n9' is not among the nodes"),
        (
            "pods/0/peakMemoryBytes",
            "lots",
            "pods[0].peakMemoryBytes: expected a non-negative number, got 'lots'",
        ),
        ("locks/0/released", "2000-01-01T00:00:00Z", "locks[0].released: before 'since'"),
        (
            "scheduler/nodeLockExpireSeconds",
            float("inf"),
            "scheduler.nodeLockExpireSeconds: expected a non-negative",
        ),
        ("quotas/0/hard", [], "quotas[0].hard: expected an object, got a list"),
    ],
)
def test_every_bad_field_is_named(path: str, value: Any, message: str) -> None:
    with pytest.raises(snap.SnapshotError) as err:
        snapread.from_document(_break(path, value))
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not JSON: Expecting value"),
        (b"\xff\xfe", "not JSON"),
        (b"[" * 100000, "not JSON: nested too deeply"),
        (b"[]", "document: expected an object, got a list"),
        (b'{"kind": "HAMiSchedulingSnapshot", "version": 1}', "source: required"),
    ],
)
def test_a_bad_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    assert main(["simulate", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hami-tune simulate: bad snapshot: {path}: {message}")


def test_a_missing_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(tmp_path / "nope.json")]) == 2
    assert (
        capsys.readouterr().err
        == f"hami-tune simulate: bad snapshot: {tmp_path / 'nope.json'}: cannot read: "
        "No such file or directory\n"
    )


def test_a_bad_set_is_a_usage_error(snapshot_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", str(snapshot_file), "--set", "deviceSplitCount=many"])
    assert exit_.value.code == 2
    assert "deviceSplitCount=many: want a whole number from 1 to 1000" in capsys.readouterr().err


def test_table_shows_each_scenario_beside_the_current_one(
    snapshot_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["simulate", str(snapshot_file), "--set", "deviceMemoryScaling=1", "--set", "deviceMemoryScaling=2"]
    )
    assert code == 0
    out = capsys.readouterr().out
    rows = {
        re.split(r"\s{2,}", line.strip())[0]: re.split(r"\s{2,}", line.strip())[1:]
        for line in out.splitlines()
        if re.search(r"\S\s{2,}\S", line)
    }
    assert rows["current"] == ["deviceMemoryScaling=1", "deviceMemoryScaling=2"]
    # e (9000 MiB) fits only when n2's 8000 physical MiB register as 16000.
    assert rows["pods placed"] == ["4 / 5", "4 / 5", "5 / 5 (+1)"]
    assert rows["still waiting at the end"] == ["1", "1", "0 (-1)"]
    assert rows["wait max"] == ["9m30s", "9m30s", "0s (-9m30s)"]  # d waited for a's card
    assert rows["cards allocated past physical"] == ["0", "0", "3 (+3 !)"]
    assert rows["node time under stuck locks"] == ["20s", "20s", "20s"]
    assert "fidelity: replaying the current configuration gives 5 of 5 pods (100.0%)" in out


def test_json_has_figures_settings_timelines_and_fidelity(
    snapshot_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", str(snapshot_file), "--json", "--samples", "10", "--set", "policy=spread"]) == 0
    doc = json.loads(capsys.readouterr().out)
    current, spread = doc["scenarios"]
    assert current["name"] == "current" and spread["name"] == "policy=spread"
    assert (
        spread["settings"]["nodeSchedulerPolicy"] == "spread"
        and spread["settings"]["gpuSchedulerPolicy"] == "spread"
    )
    assert current["settings"]["nodeLockExpireSeconds"] == 300
    assert len(current["timeline"]) == 10
    assert current["summary"]["placed"] == 4 and current["summary"]["pods"] == 5
    fidelity = {"compared": 5, "same": 5, "agreement": 1.0, "differences": [], "notCompared": 0}
    assert doc["fidelity"] == fidelity
    assert doc["snapshot"]["nodes"] == 2


def test_html_page_draws_the_charts(
    snapshot_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "what-if.html"
    assert main(["simulate", str(snapshot_file), "--html", str(page), "--set", "deviceSplitCount=1"]) == 0
    html = page.read_text(encoding="utf-8")
    assert (
        html.startswith("<!doctype html>") and "<script" not in html and "http" not in html.split("<body>")[1]
    )
    assert html.count("<svg") == 9  # three timelines, six headline bars
    # One line per scenario in each timeline, in the legend's colours.
    assert len(re.findall(r'<path d="M[^"]+" fill="none" stroke="#4c78a8"', html)) == 3
    assert len(re.findall(r'<path d="M[^"]+" fill="none" stroke="#f58518"', html)) == 3
    assert "deviceSplitCount=1" in html and "fidelity: replaying" in html
    assert "pods placed" in capsys.readouterr().out  # the table is printed as well


def test_module_entry_point(snapshot_file: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "hami.tune", "simulate", str(snapshot_file), "--set", "nodeLockExpire=30s"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "nodeLockExpire=30s" in out.stdout
