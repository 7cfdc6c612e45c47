"""hami-tune against Debian's real Prometheus, serving a TSDB backfilled from generated OpenMetrics."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami.testing import prometheus
from hami.testing.processes import free_port, python_env
from hami.tune.main import main

pytestmark = pytest.mark.skipif(not prometheus.available(), reason="prometheus/promtool not installed")

GIB = 1024**3
STEP = 60
HOURS = 3
# Whole minutes, a little in the past, so the data ends "now" for Prometheus' retention.
END = (int(time.time()) // STEP) * STEP - STEP
START = END - HOURS * 3600
MON = 'job="hami-monitor",instance="n{n}:9394",node="n{n}"'
SCH = 'job="hami-scheduler",instance="s1:9395"'


def _container(n: int, pod: str, uuid: str, limit_gib: float, peak_gib: float) -> list[tuple[str, str]]:
    labels = f'{MON.format(n=n)},namespace="ns{n}",pod="{pod}",container="main",vdevice_index="0"'
    labels += f',device_uuid="{uuid}"'
    # Used memory idles at half the peak and reaches the peak once, mid-way.
    return [
        (f"hami_vgpu_memory_limit_bytes{{{labels}}}", f"const:{limit_gib * GIB}"),
        (f"hami_vgpu_memory_used_bytes{{{labels}}}", f"peak:{peak_gib * GIB}"),
    ]


def _scenario() -> list[tuple[str, str]]:
    """A 2-node cluster. n1: two 8 GiB containers peaking at 4 GiB; n2: one 4 GiB container peaking at
    3.8 GiB. The scheduler is throttled, one device is at its split count with 3 pods pending, two node
    locks expired although binds are fast."""
    series = [
        *_container(1, "a", "GPU-a", 8, 4),
        *_container(1, "b", "GPU-a", 8, 4),
        *_container(2, "c", "GPU-c", 4, 3.8),
    ]
    for n, uuid in ((1, "GPU-a"), (1, "GPU-b"), (2, "GPU-c")):
        dev = f'device_uuid="{uuid}",device_index="0",device_type="NVIDIA-A100"'
        series += [
            (f"hami_host_gpu_memory_used_bytes{{{MON.format(n=n)},{dev}}}", f"const:{10 * GIB}"),
            (f"hami_host_gpu_memory_total_bytes{{{MON.format(n=n)},{dev}}}", f"const:{40 * GIB}"),
            (f'hami_gpu_split_limit{{{SCH},node="n{n}",{dev}}}', "const:10"),
            (
                f'hami_gpu_shared_count{{{SCH},node="n{n}",{dev}}}',
                "const:10" if uuid == "GPU-a" else "const:2",
            ),
        ]
    for n in (1, 2):
        series.append(
            (
                f'hami_device_memory_scaling{{job="hami-device-plugin",instance="n{n}:9396",node="n{n}"}}',
                "const:1",
            )
        )
    series += [
        (f'hami_scheduler_nodes{{{SCH},state="healthy"}}', "const:2"),
        (f'hami_scheduler_nodes{{{SCH},state="handshake_expired"}}', "const:0"),
        (f"hami_kube_client_qps{{{SCH}}}", "const:5"),
        (f"hami_kube_client_burst{{{SCH}}}", "const:10"),
        (f"hami_scheduler_pending_pods{{{SCH}}}", "const:3"),
        # 1 request/s, each waiting 0.2 s in the client rate limiter.
        (f'rest_client_requests_total{{{SCH},code="200",method="GET",host="api"}}', "counter:1"),
        (f'rest_client_rate_limiter_duration_seconds_count{{{SCH},verb="GET"}}', "counter:1"),
        (f'rest_client_rate_limiter_duration_seconds_sum{{{SCH},verb="GET"}}', "counter:0.2"),
        (f"hami_scheduler_node_lock_expired_total{{{SCH}}}", "steps:2"),
        (f'hami_scheduler_bind_duration_seconds_bucket{{{SCH},result="success",le="0.5"}}', "counter:0.1"),
        (f'hami_scheduler_bind_duration_seconds_bucket{{{SCH},result="success",le="+Inf"}}', "counter:0.1"),
        (f'hami_scheduler_node_lock_wait_seconds_bucket{{{SCH},le="1"}}', "counter:0.1"),
        (f'hami_scheduler_node_lock_wait_seconds_bucket{{{SCH},le="+Inf"}}', "counter:0.1"),
    ]
    return series


def _value(kind: str, arg: float, i: int, points: int) -> float:
    if kind == "const":
        return arg
    if kind == "peak":
        return arg if i == points // 2 else arg / 2
    if kind == "counter":
        return arg * STEP * i
    assert kind == "steps"  # a counter that reaches `arg` in two jumps
    return 0.0 if i < points // 3 else (arg / 2 if i < 2 * points // 3 else arg)


def _samples() -> Iterator[tuple[str, float, float]]:
    points = (END - START) // STEP + 1
    for series, spec in _scenario():
        kind, arg = spec.split(":")
        for i in range(points):
            yield series, _value(kind, float(arg), i, points), float(START + i * STEP)


@pytest.fixture(scope="module")
def prom_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("prom")
    data = work / "data"
    data.mkdir()
    prometheus.backfill_openmetrics(prometheus.openmetrics(_samples()), data, work)
    with prometheus.PrometheusServer(data) as server:
        yield server.url


def _run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, dict[str, Any]]]:
    code = main(["--json", *args])
    doc = json.loads(capsys.readouterr().out)
    return code, {r["parameter"]: r for r in doc["recommendations"]}


WINDOW = "2h"  # the backfill holds 3 hours


def test_recommendations_from_real_prometheus(prom_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, recs = _run_json(capsys, "--prometheus-url", prom_url, "--time", str(END), "--window", WINDOW)
    assert code == 0

    mem = recs["deviceMemoryScaling"]
    # Σ requested 20 GiB, Σ peak 11.8 GiB: 20 / 11.8 × 0.9 = 1.525 -> 1.5; n1 alone 1.8, n2 alone 0.95 -> 1.0.
    assert mem["value"] == "1.5"
    assert mem["current"] == "1"
    assert mem["details"] == {"safe_ratio": "1.5254", "node/n1": "1.8", "node/n2": "1"}
    # The window is 2 hours: shorter than the week the guide observes, and the reasons say so.
    assert any(re.search(r"peaks cover only (1\.9|2\.0)h of data", r) for r in mem["reasons"])

    split = recs["deviceSplitCount"]
    # Smallest request 4 GiB -> 20; pods pending with GPU-a full -> one step above max(20, current 10).
    assert (split["value"], split["current"]) == ("30", "10")

    client = recs["--kube-qps/--kube-burst"]
    # 2 nodes -> small tier 5/10, but requests wait 0.2 s in the limiter -> medium tier.
    assert client["value"] == "--kube-qps=20 --kube-burst=40"
    assert client["current"] == "--kube-qps=5 --kube-burst=10"
    assert client["details"]["kube_timeout"] == "20"

    lock = recs["nodeLockExpire"]
    # Two locks expired, binds take < 0.5 s: stale locks, shorten to 3m.
    assert (lock["value"], lock["current"]) == ("3m0s", "5m0s")

    # Every number comes with the query that produced it.
    evidence = mem["evidence"]
    assert any(
        e["query"].startswith("sum by (node) (hami_vgpu_memory_limit_bytes") and e["value"] == 16 * GIB
        for e in evidence
    )


def test_history_shorter_than_the_window_is_refused_naming_the_window(
    prom_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, recs = _run_json(capsys, "--prometheus-url", prom_url, "--time", str(END))  # default 7d
    assert code == 3
    assert all(r["value"] is None for r in recs.values())
    mem = recs["deviceMemoryScaling"]
    (missing,) = mem["missing"]
    series = r'hami_vgpu_memory_used_bytes\{job="hami-monitor"\}'
    assert re.fullmatch(rf"7d of {series} history \(have (2\.[89]|3\.0)h\)", missing)
    assert "--window 7d" in mem["reasons"][0]


def test_patch_output_rewrites_only_the_recommended_fields(
    prom_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    current = tmp_path / "device-config.yaml"
    current.write_text("nvidia:\n  resourceCountName: nvidia.com/gpu\n  deviceSplitCount: 10\n"
                       "  deviceMemoryScaling: 1.0\n  libCudaLogLevel: 0\n")  # fmt: skip
    nodes = tmp_path / "config.json"
    nodes.write_text('{"nodeconfig": [{"name": "n2", "devicesplitcount": 4}]}')
    args = ["--prometheus-url", prom_url, "--time", str(END), "--window", WINDOW, "--output", "patch"]
    assert main([*args, "--device-config", str(current), "--node-config", str(nodes)]) == 0
    device, node = yaml.safe_load_all(capsys.readouterr().out)
    assert device["metadata"] == {"name": "hami-device-config", "namespace": "hami-system"}
    assert yaml.safe_load(device["data"]["device-config.yaml"]) == {
        "nvidia": {
            "resourceCountName": "nvidia.com/gpu",
            "deviceSplitCount": 30,
            "deviceMemoryScaling": 1.5,
            "libCudaLogLevel": 0,
        }
    }
    assert json.loads(node["data"]["config.json"]) == {
        "nodeconfig": [
            {"name": "n2", "devicesplitcount": 4, "devicememoryscaling": 1.0},
            {"name": "n1", "devicememoryscaling": 1.8},
        ]
    }


def test_patch_output_needs_the_current_config(prom_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--prometheus-url", prom_url, "--output", "patch"])
    assert exit_info.value.code == 2
    assert "--device-config FILE" in capsys.readouterr().err


def test_text_output_shows_evidence(prom_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--prometheus-url", prom_url, "--time", str(END), "--window", WINDOW]) == 0
    out = capsys.readouterr().out
    assert "deviceSplitCount: 30   (current: 10)" in out
    assert 'max(hami_kube_client_qps{job="hami-scheduler"})' in out
    assert "evidence:" in out


def test_refuses_and_names_the_missing_series(prom_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, recs = _run_json(
        capsys, "--prometheus-url", prom_url, "--time", str(END), "--window", WINDOW,
        "--scheduler-job", "other-scheduler",
    )
    assert code == 3
    assert recs["--kube-qps/--kube-burst"]["value"] is None
    assert recs["--kube-qps/--kube-burst"]["missing"] == ['hami_scheduler_nodes{job="other-scheduler"}']
    assert recs["nodeLockExpire"]["missing"] == [
        'hami_scheduler_node_lock_expired_total{job="other-scheduler"}',
        'hami_scheduler_bind_duration_seconds_bucket{job="other-scheduler"}',
        'hami_scheduler_node_lock_wait_seconds_bucket{job="other-scheduler"}',
    ]
    # The monitor's data is still there: those recommendations stand.
    assert recs["deviceMemoryScaling"]["value"] == "1.5"


def test_before_any_data_everything_is_refused(prom_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, recs = _run_json(
        capsys, "--prometheus-url", prom_url, "--time", str(START - 86400), "--window", "1h"
    )
    assert code == 3
    assert all(r["value"] is None for r in recs.values())
    assert recs["deviceMemoryScaling"]["missing"] == [
        'hami_vgpu_memory_limit_bytes{job="hami-monitor"}',
        'hami_vgpu_memory_used_bytes{job="hami-monitor"}',
    ]


def test_unreachable_prometheus_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["--prometheus-url", url, "--timeout", "5"]) == 1
    assert "cannot reach Prometheus" in capsys.readouterr().err


def test_module_entry_point(prom_url: str, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "hami.tune", "--prometheus-url", prom_url, "--time", str(END), "--json",
         "--window", WINDOW],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env=python_env(),
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["recommendations"][0]["parameter"] == "deviceMemoryScaling"
