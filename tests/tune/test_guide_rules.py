"""The tuning guide's symptom table, row by row, through Debian's real Prometheus on recorded data: a
cluster where each new rule fires, and a calm cluster where every rule keeps the current value."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami.testing import chart, prometheus
from hami.tune.main import main

pytestmark = pytest.mark.skipif(not prometheus.available(), reason="prometheus/promtool not installed")

GIB, MIB = 1024**3, 1024**2
STEP = 60
END = (int(time.time()) // STEP) * STEP - STEP
START = END - 3 * 3600
WINDOW = "2h"
SCH = 'job="hami-scheduler",instance="s1:9395"'
EXTENDER = 'namespace="kube-system",pod="hami-scheduler-0",container="vgpu-scheduler-extender"'
KSM = f'job="kube-state-metrics",{EXTENDER}'


def _mon(node: str) -> str:
    return f'job="hami-monitor",instance="{node}:9394",node="{node}"'


def _container(node: str, pod: str, uuid: str, cores: tuple[int, int]) -> list[tuple[str, str]]:
    """An 8 GiB container using 7 GiB at its peak, `cores` = (limit, used) percent."""
    labels = (
        f'{_mon(node)},namespace="ml",pod="{pod}",container="main",vdevice_index="0",device_uuid="{uuid}"'
    )
    return [
        (f"hami_vgpu_memory_limit_bytes{{{labels}}}", f"const:{8 * GIB}"),
        (f"hami_vgpu_memory_used_bytes{{{labels}}}", f"peak:{7 * GIB}"),
        (f"hami_vgpu_core_limit_percent{{{labels}}}", f"const:{cores[0]}"),
        (f"hami_vgpu_core_used_percent{{{labels}}}", f"const:{cores[1]}"),
    ]


def _device(node: str, uuid: str, shared: int, utilisation: float) -> list[tuple[str, str]]:
    dev = f'node="{node}",device_uuid="{uuid}",device_index="0",device_type="NVIDIA-A100"'
    return [
        (f"hami_gpu_split_limit{{{SCH},{dev}}}", "const:10"),
        (f"hami_gpu_shared_count{{{SCH},{dev}}}", f"const:{shared}"),
        (f'hami_host_gpu_utilization_ratio{{{_mon(node)},device_uuid="{uuid}"}}', f"const:{utilisation}"),
        # The physical-memory guard's data: a quarter of the card used, so over-commit may be raised.
        (f'hami_host_gpu_memory_used_bytes{{{_mon(node)},device_uuid="{uuid}"}}', f"const:{10 * GIB}"),
        (f'hami_host_gpu_memory_total_bytes{{{_mon(node)},device_uuid="{uuid}"}}', f"const:{40 * GIB}"),
    ]


def _busy() -> list[tuple[str, str]]:
    """Three nodes with 8 GiB containers: GPU-a full by count (10 of 10) while every GPU idles at 10%;
    n3 runs vGPU pods (3 on GPU-x) but its monitor reports none; the extender (256Mi/1Gi) was
    OOMKilled. No lock metrics: that rule prints the guide's starting point."""
    return [
        *_container("n1", "a", "GPU-a", (50, 40)),
        *_container("n2", "c", "GPU-c", (50, 40)),
        *_device("n1", "GPU-a", 10, 0.1),
        *_device("n2", "GPU-c", 2, 0.1),
        *_device("n3", "GPU-x", 3, 0.1),
        (f'hami_scheduler_nodes{{{SCH},state="healthy"}}', "const:3"),
        (f"hami_scheduler_pending_pods{{{SCH}}}", "const:0"),
        (f'kube_pod_container_resource_requests{{{KSM},resource="cpu",unit="core"}}', "const:0.2"),
        (
            f'kube_pod_container_resource_requests{{{KSM},resource="memory",unit="byte"}}',
            f"const:{256 * MIB}",
        ),
        (f'kube_pod_container_resource_limits{{{KSM},resource="memory",unit="byte"}}', f"const:{1024 * MIB}"),
        (f'kube_pod_container_status_last_terminated_reason{{{KSM},reason="OOMKilled"}}', "const:1"),
        (f'container_memory_working_set_bytes{{job="kubelet",{EXTENDER}}}', f"peak:{1000 * MIB}"),
    ]


def _calm() -> list[tuple[str, str]]:
    """Three nodes where every quantity is where the guide wants it."""
    series = [
        *_container("n1", "a", "GPU-a", (50, 40)),
        *_container("n2", "c", "GPU-c", (50, 40)),
        *_device("n1", "GPU-a", 1, 0.6),
        *_device("n2", "GPU-c", 1, 0.6),
        (f'hami_scheduler_nodes{{{SCH},state="healthy"}}', "const:3"),
        (f"hami_scheduler_pending_pods{{{SCH}}}", "const:0"),
        (f"hami_kube_client_qps{{{SCH}}}", "const:5"),
        (f"hami_kube_client_burst{{{SCH}}}", "const:10"),
        (f"hami_scheduler_node_lock_timeout_seconds{{{SCH}}}", "const:300"),
        (f'rest_client_requests_total{{{SCH},code="200",method="GET",host="api"}}', "counter:0.5"),
        (f'rest_client_rate_limiter_duration_seconds_count{{{SCH},verb="GET"}}', "counter:0.5"),
        (f'rest_client_rate_limiter_duration_seconds_sum{{{SCH},verb="GET"}}', "counter:0.001"),
        (f"hami_scheduler_node_lock_expired_total{{{SCH}}}", "const:0"),
        (f'hami_scheduler_bind_duration_seconds_bucket{{{SCH},result="success",le="0.5"}}', "counter:0.1"),
        (f'hami_scheduler_bind_duration_seconds_bucket{{{SCH},result="success",le="+Inf"}}', "counter:0.1"),
        (f'hami_scheduler_node_lock_wait_seconds_bucket{{{SCH},le="1"}}', "counter:0.1"),
        (f'hami_scheduler_node_lock_wait_seconds_bucket{{{SCH},le="+Inf"}}', "counter:0.1"),
        (f'kube_pod_container_resource_requests{{{KSM},resource="cpu",unit="core"}}', "const:0.1"),
        (f'kube_pod_container_resource_limits{{{KSM},resource="cpu",unit="core"}}', "const:0.5"),
        (
            f'kube_pod_container_resource_requests{{{KSM},resource="memory",unit="byte"}}',
            f"const:{128 * MIB}",
        ),
        (f'kube_pod_container_resource_limits{{{KSM},resource="memory",unit="byte"}}', f"const:{512 * MIB}"),
        (f'container_memory_working_set_bytes{{job="kubelet",{EXTENDER}}}', f"peak:{300 * MIB}"),
    ]
    for n in ("n1", "n2"):
        series.append((f'hami_device_memory_scaling{{job="hami-device-plugin",node="{n}"}}', "const:1"))
    # A second monitor job scraped through a relabelling that dropped the node label.
    unlabelled = 'job="relabelled-monitor",instance="x:9394",namespace="ml",pod="a",container="main"'
    series.append((f"hami_vgpu_memory_limit_bytes{{{unlabelled}}}", f"const:{8 * GIB}"))
    return series


def _serve(tmp: Path, scenario: list[tuple[str, str]]) -> Iterator[str]:
    data = tmp / "data"
    data.mkdir()
    samples = prometheus.recorded(scenario, START, END, STEP)
    prometheus.backfill_openmetrics(prometheus.openmetrics(samples), data, tmp)
    with prometheus.PrometheusServer(data) as server:
        yield server.url


@pytest.fixture(scope="module")
def busy_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _serve(tmp_path_factory.mktemp("busy"), _busy())


@pytest.fixture(scope="module")
def calm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _serve(tmp_path_factory.mktemp("calm"), _calm())


def _json(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, dict[str, dict[str, Any]]]:
    code = main(["--json", "--prometheus-url", url, "--time", str(END), "--window", WINDOW, *args])
    return code, {r["parameter"]: r for r in json.loads(capsys.readouterr().out)["recommendations"]}


def test_busy_cluster_fires_each_row(
    busy_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    current = tmp_path / "values.yaml"
    current.write_text("devices:\n  nvidia:\n    libCudaLogLevel: 3\n", encoding="utf-8")
    code, recs = _json(capsys, busy_url, "--values", str(current))
    assert code == 3  # the lock rule has no data

    split = recs["deviceSplitCount"]
    # 8 GiB requests -> 10 by size; 10% utilisation while GPU-a is full by count -> 20.
    assert (split["value"], split["current"]) == ("20", "10")
    assert any("mean GPU utilisation 10%" in r and "raise to 20" in r for r in split["reasons"])

    resources = recs["scheduler.extender.resources"]
    # 3 nodes: 100m/500m/128Mi/512Mi, the current requests are kept; OOMKilled: 2 x 1Gi = 2Gi.
    assert resources["value"] == "requests cpu=200m memory=256Mi, limits cpu=500m memory=2048Mi"
    assert resources["current"] == "requests cpu=200m memory=256Mi, limits cpu=unset memory=1024Mi"
    assert any("OOMKilled (1 in the window)" in r for r in resources["reasons"])

    monitor = recs["devicePlugin.monitor.extraArgs"]
    assert (monitor["value"], monitor["current"]) == ("-v=4", "[]")
    assert monitor["details"] == {"nodes_without_data": "n3"}

    level = recs["devices.nvidia.libCudaLogLevel"]
    assert (level["value"], level["current"]) == ("0", "3")

    # SM use within limits in production: the policy stays; no gpucores change.
    assert recs["devices.nvidia.gpuCorePolicy"]["value"] == "default"
    assert recs["nvidia.com/gpucores (per pod)"]["value"] == "as requested"

    # Without lock data: the guide's starting point, marked as such, never as the value.
    lock = recs["nodeLockExpire"]
    assert lock["value"] is None
    assert lock["missing"] == [
        'hami_scheduler_node_lock_expired_total{job="hami-scheduler"}',
        'hami_scheduler_bind_duration_seconds_bucket{job="hami-scheduler"}',
        'hami_scheduler_node_lock_wait_seconds_bucket{job="hami-scheduler"}',
    ]
    assert lock["start"] == "5m (the default, docs/guides/tuning.md §2.2)"


def test_development_turns_core_limits_off(busy_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _, recs = _json(capsys, busy_url, "--environment", "development")
    assert recs["devices.nvidia.gpuCorePolicy"]["value"] == "disable"
    # Development keeps its log level (the template's is 3).
    assert recs["devices.nvidia.libCudaLogLevel"]["value"] == "1"


def test_text_marks_starting_points_as_not_measured(
    busy_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["--prometheus-url", busy_url, "--time", str(END), "--window", WINDOW])
    out = capsys.readouterr().out
    assert "nodeLockExpire: NO RECOMMENDATION" in out
    assert "starting point without history, not measured: 5m (the default, docs/guides/tuning.md §2.2)" in out


def test_calm_cluster_keeps_every_value(calm_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, recs = _json(capsys, calm_url)
    assert code == 0
    moved = {p: (r["current"], r["value"]) for p, r in recs.items() if r["value"] != r["current"]}
    assert moved == {}


def test_calm_cluster_values_file_is_empty(calm_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--prometheus-url", calm_url, "--time", str(END), "--window", WINDOW, "--output", "values"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "{}"
    assert not [line for line in out.splitlines() if line and not line.startswith(("#", "{}"))]


def test_series_without_a_join_label_is_bad_input(calm_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--prometheus-url", calm_url, "--time", str(END), "--window", WINDOW]
    assert main([*args, "--monitor-job", "relabelled-monitor"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == [
        'hami-tune: hami_vgpu_memory_limit_bytes{job="relabelled-monitor"} has series without a node label: '
        "hami-tune joins on node, namespace, pod, container; keep the exporters' labels when scraping "
        "(honor_labels: true)"
    ]


def test_before_after_shows_what_moved(busy_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The containers peak at 7 GiB once, mid-way (START + 90 min), and idle at 3.5 GiB: a 1h window
    # just after the peak holds it, the last hour does not.
    peak = START + 90 * 60
    args = ["--prometheus-url", busy_url, "--window", "1h", "--json"]
    assert main([*args, "--before", str(peak + 60), "--after", str(END)]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = [q for q in doc["quantities"] if q["parameter"] == "deviceMemoryScaling"]
    # 16 GiB requested over 14 GiB peak x 0.9 = 1.03 -> 1; over 7 GiB -> 2.06, capped at 2.
    assert (rows[0]["quantity"], rows[0]["before"], rows[0]["after"]) == ("recommendation", "1", "2")
    moved = {q["quantity"] for q in rows if q["changed"]}
    assert any(q.startswith("sum by (node) (max_over_time(hami_vgpu_memory_used_bytes") for q in moved)
    split = [q["changed"] for q in doc["quantities"] if q["parameter"] == "deviceSplitCount"]
    assert split and not any(split)  # constant inputs, the same answer


def test_before_needs_after(busy_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--prometheus-url", busy_url, "--before", str(END)])
    assert exc.value.code == 2
    assert "--before and --after go together" in capsys.readouterr().err


def _values_file(capsys: pytest.CaptureFixture[str], tmp_path: Path, url: str, *args: str) -> Path:
    main(["--prometheus-url", url, "--time", str(END), "--window", WINDOW, "--output", "values", *args])
    path = tmp_path / "tuned.yaml"
    path.write_text(capsys.readouterr().out, encoding="utf-8")
    return path


def test_values_file_renders_with_the_chart_and_each_value_lands(
    busy_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    current = tmp_path / "current.yaml"
    current.write_text("devices:\n  nvidia:\n    libCudaLogLevel: 3\n", encoding="utf-8")
    tuned = _values_file(capsys, tmp_path, busy_url, "--values", str(current))
    doc = yaml.safe_load(tuned.read_text(encoding="utf-8"))
    # Only the keys the recommendations change (the SM-use rules keep theirs).
    assert doc == {
        "devicePlugin": {
            "deviceMemoryScaling": 1.0,
            "deviceSplitCount": 20,
            "monitor": {"extraArgs": ["-v=4"]},
        },
        "scheduler": {
            "extender": {
                "extraArgs": ["--debug", "-v=4", "--kube-qps=5", "--kube-burst=10", "--kube-timeout=15"],
                "resources": {"limits": {"cpu": "500m", "memory": "2048Mi"}},
            }
        },
        "devices": {"nvidia": {"libCudaLogLevel": 0}},
    }
    # Each key sits under the evidence for it.
    text = tuned.read_text(encoding="utf-8")
    assert "# deviceSplitCount: 10 -> 20\n" in text
    assert "mean GPU utilisation 10%" in text.split("deviceSplitCount: 20")[0]
    # helm upgrade -f current.yaml -f tuned.yaml
    objects = chart.render([current, tuned])
    assert chart.validate(objects) == []
    assert chart.unlanded(objects, doc) == []
    assert chart.tuned(objects)["scheduler.extender.kube_client"] == (5.0, 10, 15.0)


def test_development_values_turn_the_core_limit_off(
    busy_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tuned = _values_file(capsys, tmp_path, busy_url, "--environment", "development")
    doc = yaml.safe_load(tuned.read_text(encoding="utf-8"))
    assert doc["devices"] == {"nvidia": {"gpuCorePolicy": "disable"}}
    objects = chart.render([tuned])
    assert chart.unlanded(objects, doc) == []
    assert chart.tuned(objects)["devices.nvidia.gpuCorePolicy"] == "disable"


def test_unlanded_names_a_value_the_chart_did_not_take() -> None:
    # The check itself can fail: the chart's defaults do not carry a tuned split count.
    assert chart.unlanded(chart.render(), {"devicePlugin": {"deviceSplitCount": 20}}) == [
        "devicePlugin.deviceSplitCount: the values file says 20, the rendered chart carries 10"
    ]
