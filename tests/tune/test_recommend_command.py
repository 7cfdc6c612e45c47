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

from hami.core import names
from hami.core.snapshot import model as snap
from hami.core.snapshot import writer as snapwrite
from hami.testing import chart, prometheus, whatif
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


def _container(
    n: int, pod: str, uuid: str, memory_gib: tuple[float, float], cores: tuple[int, int]
) -> list[tuple[str, str]]:
    labels = f'{MON.format(n=n)},namespace="ns{n}",pod="{pod}",container="main",vdevice_index="0"'
    labels += f',device_uuid="{uuid}"'
    (limit_gib, peak_gib), (core_limit, core_used) = memory_gib, cores
    # Used memory idles at half the peak and reaches the peak once, mid-way.
    return [
        (f"hami_vgpu_memory_limit_bytes{{{labels}}}", f"const:{limit_gib * GIB}"),
        (f"hami_vgpu_memory_used_bytes{{{labels}}}", f"peak:{peak_gib * GIB}"),
        (f"hami_vgpu_core_limit_percent{{{labels}}}", f"const:{core_limit}"),
        (f"hami_vgpu_core_used_percent{{{labels}}}", f"const:{core_used}"),
    ]


def _scenario() -> list[tuple[str, str]]:
    """A 2-node cluster. n1: two 8 GiB containers peaking at 4 GiB; n2: one 4 GiB container peaking at
    3.8 GiB. The scheduler is throttled, one device is at its split count with 3 pods pending, two node
    locks expired although binds are fast. SM use: a takes 45% on a 30% limit, b 10% of 50%, c 60% of
    100%."""
    series = [
        *_container(1, "a", "GPU-a", (8, 4), (30, 45)),
        *_container(1, "b", "GPU-a", (8, 4), (50, 10)),
        *_container(2, "c", "GPU-c", (4, 3.8), (100, 60)),
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


@pytest.fixture(scope="module")
def prom_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("prom")
    data = work / "data"
    data.mkdir()
    samples = prometheus.recorded(_scenario(), START, END, STEP)
    prometheus.backfill_openmetrics(prometheus.openmetrics(samples), data, work)
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

    policy = recs["devices.nvidia.gpuCorePolicy"]
    # a's p95 45% exceeds 1.1 x its 30% limit: isolation is imprecise.
    assert (policy["value"], policy["current"]) == ("force", "default")
    assert "ns1/a/main p95 45% of limit 30%" in policy["reasons"][0]
    assert any(
        e["query"] == 'quantile_over_time(0.95, hami_vgpu_core_used_percent{job="hami-monitor"}[2h])'
        and "pod=a" in e["labels"] and e["value"] == 45
        for e in policy["evidence"]
    )
    cores = recs["nvidia.com/gpucores (per pod)"]
    # a: 45 x 1.2 = 54 -> 55; b: 10 x 1.2 = 12 -> 15; c uses 60 of 100, left as it is.
    assert cores["details"] == {"pod/ns1/a/main": "55", "pod/ns1/b/main": "15"}

    # The chart's default level 1 is quiet enough for production: kept.
    level = recs["devices.nvidia.libCudaLogLevel"]
    assert (level["value"], level["current"]) == ("1", "1")

    resources = recs["scheduler.extender.resources"]
    # 2 nodes: the < 50 row of the table; without kube-state-metrics the current value is unknown.
    assert resources["value"] == "requests cpu=100m memory=128Mi, limits cpu=500m memory=512Mi"
    assert resources["current"] is None
    assert any("kube_pod_container_status_last_terminated_reason" in r for r in resources["reasons"])

    monitor = recs["devicePlugin.monitor.extraArgs"]
    # Both nodes with vGPU pods report their containers: nothing to debug.
    assert (monitor["value"], monitor["current"]) == ("[]", "[]")

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
    windowed = (
        "deviceMemoryScaling", "deviceSplitCount", "--kube-qps/--kube-burst", "nodeLockExpire",
        "devices.nvidia.gpuCorePolicy", "nvidia.com/gpucores (per pod)",
    )  # fmt: skip
    assert all(recs[p]["value"] is None for p in windowed)
    mem = recs["deviceMemoryScaling"]
    # Instead of a number that looks measured, the guide's starting point, said to be one.
    assert mem["start"] == "1.5 (start there and watch for a week, docs/guides/tuning.md §3.3)"
    assert recs["devices.nvidia.gpuCorePolicy"]["start"].startswith("force (the production template")
    (missing,) = mem["missing"]
    series = r'hami_vgpu_memory_used_bytes\{job="hami-monitor"\}'
    assert re.fullmatch(rf"7d of {series} history \(have (2\.[89]|3\.0)h\)", missing)
    assert "--window 7d" in mem["reasons"][0]


def test_patch_output_rewrites_only_the_recommended_fields(
    prom_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    current = tmp_path / "device-config.yaml"
    current.write_text("nvidia:\n  resourceCountName: nvidia.com/gpu\n  deviceSplitCount: 10\n"
                       "  deviceMemoryScaling: 1.0\n  libCudaLogLevel: 0\n", encoding="utf-8")  # fmt: skip
    nodes = tmp_path / "config.json"
    nodes.write_text('{"nodeconfig": [{"name": "n2", "devicesplitcount": 4}]}', encoding="utf-8")
    args = ["--prometheus-url", prom_url, "--time", str(END), "--window", WINDOW, "--output", "patch"]
    assert main([*args, "--device-config", str(current), "--node-config", str(nodes)]) == 0
    device, node = yaml.safe_load_all(capsys.readouterr().out)
    # the ConfigMap the chart installs, where the guides install it
    assert device["metadata"] == {"name": names.DEVICE_CONFIGMAP, "namespace": names.NAMESPACE}
    assert node["metadata"] == {"name": names.NODE_CONFIGMAP, "namespace": names.NAMESPACE}
    assert yaml.safe_load(device["data"]["device-config.yaml"]) == {
        "nvidia": {
            "resourceCountName": "nvidia.com/gpu",
            "deviceSplitCount": 30,
            "deviceMemoryScaling": 1.5,
            "libCudaLogLevel": 0,  # the rule keeps the chart's quiet level: the file's stays
            "gpuCorePolicy": "force",  # a's SM use exceeds its limit
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


def test_a_window_without_samples_is_bad_input(prom_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--prometheus-url", prom_url, "--time", str(START - 86400), "--window", "1h"])
    assert code == 2
    out = capsys.readouterr()
    assert out.out == ""
    (line,) = out.err.splitlines()
    assert "no samples of hami_vgpu_memory_limit_bytes" in line and "--window 1h" in line


def test_unreachable_prometheus_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["--prometheus-url", url, "--timeout", "5"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"hami-tune: cannot reach Prometheus at {url}")


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


def test_values_output_lands_in_the_chart(
    prom_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = ["--prometheus-url", prom_url, "--time", str(END), "--window", WINDOW, "--output", "values"]
    assert main(args) == 0
    tuned = tmp_path / "tuned.yaml"
    tuned.write_text(capsys.readouterr().out, encoding="utf-8")
    doc = yaml.safe_load(tuned.read_text(encoding="utf-8"))
    assert doc["scheduler"]["nodeLockExpire"] == "3m0s"
    assert doc["devices"] == {"nvidia": {"gpuCorePolicy": "force"}}
    assert doc["devicePlugin"]["deviceMemoryScaling"] == 1.5
    objects = chart.render([tuned])
    assert chart.unlanded(objects, doc) == []
    landed = chart.tuned(objects)
    assert landed["scheduler.nodeLockExpire"] == 180.0
    assert landed["scheduler.extender.kube_client"] == (20.0, 40, 20.0)


def _verify_snapshot(path: Path) -> Path:
    """n1 (two 40 GiB cards) and n2 (one), both registered at scaling 1; 24 pods of 8 GiB arrive one
    a minute and run for an hour; a bind crashed on n2 and left its lock a minute before the first."""
    nodes = [whatif.node("n1", 40960, 40960), whatif.node("n2", 40960)]
    pods = [whatif.pod(f"p{i}", 60 * i, mem=8192, until=60 * i + 3600) for i in range(24)]
    lock = snap.Lock("n2", whatif.T0 - 60, "ml/crashed")
    snapwrite.save_snapshot(whatif.snapshot(nodes, pods, end=4 * 3600, locks=[lock]), path)
    return path


def test_verify_replays_each_recommendation(
    prom_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _verify_snapshot(tmp_path / "snap.json")
    args = ["--prometheus-url", prom_url, "--time", str(END), "--window", WINDOW, "--verify", str(path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    section = out[out.index("verification: each recommendation replayed against") :]
    assert section.splitlines()[1].startswith("  fidelity: replaying the current configuration gives")
    # 1.5 globally, 1.8 on n1 (the per-node detail), 1 on n2: fewer 8 GiB pods wait, and n1's cards
    # now promise more memory than they have.
    memory = section[section.index("  deviceMemoryScaling=1.5:") :]
    assert memory.startswith(
        "  deviceMemoryScaling=1.5: worse for over-commit headroom, least card, cards allocated past physical"
    )
    assert (
        "    placed after waiting: 9 -> 1" in memory and "    cards allocated past physical: 0 -> 2" in memory
    )
    assert "  deviceSplitCount=30: changes nothing in this history" in section
    assert "  --kube-qps/--kube-burst=--kube-qps=20 --kube-burst=40: not simulated" in section
    lock = section[section.index("  nodeLockExpire=3m0s:") :]
    assert lock.startswith("  nodeLockExpire=3m0s: no figure gets worse")
    assert "    node time under stuck locks: 4m -> 2m" in lock


def test_verify_in_json(prom_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _verify_snapshot(tmp_path / "snap.json")
    args = ["--prometheus-url", prom_url, "--time", str(END), "--window", WINDOW, "--json"]
    assert main([*args, "--verify", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    checks = {c["parameter"]: c for c in doc["verification"]["checks"]}
    assert checks["--kube-qps/--kube-burst"]["simulated"] is False
    assert checks["deviceMemoryScaling"]["worse"] == [
        "over-commit headroom, least card",
        "cards allocated past physical",
    ]
    assert "placed after waiting" in checks["deviceMemoryScaling"]["better"]
    assert checks["deviceSplitCount"]["changes"] == []


def test_verify_with_a_bad_snapshot_stops_before_querying(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}", encoding="utf-8")
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["--prometheus-url", url, "--verify", str(bad)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"hami-tune: --verify: bad snapshot: {bad}: kind: expected") and err.count("\n") == 1
    )
