"""hami-tune's guards: a guard that has no data blocks the change it guards, and says why.

One real Prometheus holds several copies of one small cluster under different job names, each copy
missing the series behind one guard; --monitor-job/--scheduler-job/--device-plugin-job pick the copy.
The windows are short (2m), as on a fresh demo, where a 5-minute subquery step once returned nothing.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hami.testing import prometheus
from hami.tune import client
from hami.tune import recommend as r
from hami.tune.main import main

pytestmark = pytest.mark.skipif(not prometheus.available(), reason="prometheus/promtool not installed")

GIB = 1024**3
STEP = 15
# 3 minutes past a 5-minute mark: no 5-minute subquery step falls in the 2 minutes before it (Prometheus
# aligns subquery steps to multiples of the step), as on the demo when a 5m step over --window 2m was empty.
END = (int(time.time()) // 300) * 300 - 120
START = END - 6 * 60  # six minutes of history
WINDOW = "2m"
# Each copy lacks the series its name says; "full" lacks none.
COPIES = ("full", "nophys", "nosat", "nothrottle", "nolockwait")


def _cluster(copy: str) -> list[tuple[str, str]]:
    """One GPU node at deviceMemoryScaling 1.5: two 8 GiB containers using 4 GiB each (safe ratio 1.8),
    on a card whose physical memory is 95 % used; a device full by count with pods pending; the
    extender configured for 50 QPS on a 2-node cluster."""
    mon = f'job="hami-monitor-{copy}",instance="n1:9394",node="n1"'
    sch = f'job="hami-scheduler-{copy}",instance="s1:9395"'
    dev = 'device_uuid="GPU-a",device_index="0",device_type="NVIDIA-A100"'
    series: list[tuple[str, str]] = []
    for pod in ("a", "b"):
        who = f'{mon},namespace="ns",pod="{pod}",container="main",vdevice_index="0",{dev}'
        series += [
            (f"hami_vgpu_memory_limit_bytes{{{who}}}", f"const:{8 * GIB}"),
            (f"hami_vgpu_memory_used_bytes{{{who}}}", f"const:{4 * GIB}"),
            (f"hami_vgpu_core_limit_percent{{{who}}}", "const:50"),
            (f"hami_vgpu_core_used_percent{{{who}}}", "const:40"),
        ]
    if copy != "nophys":
        series += [
            (f"hami_host_gpu_memory_used_bytes{{{mon},{dev}}}", f"const:{38 * GIB}"),
            (f"hami_host_gpu_memory_total_bytes{{{mon},{dev}}}", f"const:{40 * GIB}"),
        ]
    series.append(
        (
            f'hami_device_memory_scaling{{job="hami-device-plugin-{copy}",instance="n1:9396",node="n1"}}',
            "const:1.5",
        )
    )
    series.append((f'hami_gpu_split_limit{{{sch},node="n1",{dev}}}', "const:10"))
    if copy != "nosat":
        series.append((f'hami_gpu_shared_count{{{sch},node="n1",{dev}}}', "const:10"))
    series += [
        (f'hami_scheduler_nodes{{{sch},state="healthy"}}', "const:2"),
        (f"hami_kube_client_qps{{{sch}}}", "const:50"),
        (f"hami_kube_client_burst{{{sch}}}", "const:100"),
        (f"hami_scheduler_pending_pods{{{sch}}}", "const:3"),
        (f'rest_client_requests_total{{{sch},code="200",method="GET",host="api"}}', "counter:1"),
        (f"hami_scheduler_node_lock_expired_total{{{sch}}}", "const:0"),
        (f'hami_scheduler_bind_duration_seconds_bucket{{{sch},result="success",le="0.5"}}', "counter:0.1"),
        (f'hami_scheduler_bind_duration_seconds_bucket{{{sch},result="success",le="+Inf"}}', "counter:0.1"),
    ]
    if copy != "nothrottle":
        series += [
            (f'rest_client_rate_limiter_duration_seconds_count{{{sch},verb="GET"}}', "counter:1"),
            (f'rest_client_rate_limiter_duration_seconds_sum{{{sch},verb="GET"}}', "counter:0"),
        ]
    if copy != "nolockwait":
        series += [
            (f'hami_scheduler_node_lock_wait_seconds_bucket{{{sch},le="1"}}', "counter:0.1"),
            (f'hami_scheduler_node_lock_wait_seconds_bucket{{{sch},le="+Inf"}}', "counter:0.1"),
        ]
    return series


@pytest.fixture(scope="module")
def prom_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("prom")
    data = work / "data"
    data.mkdir()
    scenario = [s for copy in COPIES for s in _cluster(copy)]
    samples = prometheus.recorded(scenario, START, END, STEP)
    prometheus.backfill_openmetrics(prometheus.openmetrics(samples), data, work)
    with prometheus.PrometheusServer(data) as server:
        yield server.url


def _jobs(copy: str) -> list[str]:
    return [
        "--monitor-job", f"hami-monitor-{copy}",
        "--scheduler-job", f"hami-scheduler-{copy}",
        "--device-plugin-job", f"hami-device-plugin-{copy}",
    ]  # fmt: skip


def _recs(capsys: pytest.CaptureFixture[str], url: str, copy: str) -> dict[str, dict[str, Any]]:
    code = main(["--json", "--prometheus-url", url, "--time", str(END), "--window", WINDOW, *_jobs(copy)])
    recs = {x["parameter"]: x for x in json.loads(capsys.readouterr().out)["recommendations"]}
    # missing data, whether it refused a value or held one back, is exit 3
    assert code == (3 if any(r["missing"] for r in recs.values()) else 0)
    return recs


def test_physical_memory_is_measured_over_a_short_window(
    prom_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The demo's case: over-committed at 1.5, the card 95 % full. With data the guard reduces to 1.0;
    # a 5-minute subquery step over --window 2m found none, and 1.8 was advised.
    mem = _recs(capsys, prom_url, "full")["deviceMemoryScaling"]
    assert (mem["value"], mem["current"]) == ("1", "1.5")
    assert any("nodes n1 ran out of physical memory" in x for x in mem["reasons"])


def test_memory_scaling_raise_without_physical_data_is_blocked(
    prom_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    mem = _recs(capsys, prom_url, "nophys")["deviceMemoryScaling"]
    assert (mem["value"], mem["current"]) == ("1.5", "1.5")
    assert any(x.startswith("raise blocked: the physical-memory guard") and "n1" in x for x in mem["reasons"])
    assert mem["missing"] == [f"{r.PHYSICAL_SERIES} on n1"]


def test_split_raise_without_saturation_data_is_blocked(
    prom_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    split = _recs(capsys, prom_url, "nosat")["deviceSplitCount"]
    # 8 GiB requests -> 10 by the table; the pending-pods raise to 20 needs devices full by count.
    assert (split["value"], split["current"]) == ("10", "10")
    assert split["missing"] == ["hami_gpu_shared_count (devices full by count)"]
    assert not any("not the limit" in x for x in split["reasons"])
    assert _recs(capsys, prom_url, "full")["deviceSplitCount"]["value"] == "20"


def test_client_budget_is_not_lowered_without_throttling_data(
    prom_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client = _recs(capsys, prom_url, "nothrottle")["--kube-qps/--kube-burst"]
    assert client["value"] == client["current"] == "--kube-qps=50 --kube-burst=100"
    assert any(x.startswith("lowering blocked") for x in client["reasons"])
    # Measured and quiet, the 2-node tier applies.
    assert (
        _recs(capsys, prom_url, "full")["--kube-qps/--kube-burst"]["value"] == "--kube-qps=5 --kube-burst=10"
    )


def test_node_lock_without_lock_waits_is_refused(prom_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    lock = _recs(capsys, prom_url, "nolockwait")["nodeLockExpire"]
    assert lock["value"] is None
    assert any("hami_scheduler_node_lock_wait_seconds_bucket" in m for m in lock["missing"])
    assert _recs(capsys, prom_url, "full")["nodeLockExpire"]["value"] == "5m0s"


def test_too_early_is_said_once_with_when_to_retry(prom_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Six minutes of history, --window 10m: the banner's command on a fresh demo.
    code = main(["--prometheus-url", prom_url, "--time", str(END), "--window", "10m", *_jobs("full")])
    out = capsys.readouterr().out
    assert code == 3
    assert out.count("too early:") == 1
    # 6 of 10 minutes held (to the history query's 1-minute step): about 4 more to wait.
    assert re.search(r"computed over --window 10m: retry in about [45]m \(at \d\d:\d\d UTC\)", out)
    assert "refusing:" not in out
    assert out.count("NO RECOMMENDATION (too early, see above)") == 6


# --- the same guards, pure ------------------------------------------------------------------------------


def test_each_node_without_physical_data_keeps_its_value() -> None:
    nodes = [
        r.NodeMemory("seen", 80 * GIB, 40 * GIB, 1.0, 0.5),
        r.NodeMemory("blind", 80 * GIB, 20 * GIB, 1.2),
    ]
    rec = r.recommend_memory_scaling(nodes)
    # Global 1.2 (the blind node's current), the seen node raised on its own to 1.8.
    assert rec.value == "1.2"
    assert rec.details["node/seen"] == "1.8"
    assert "node/blind" not in rec.details
    assert rec.missing == (f"{r.PHYSICAL_SERIES} on blind",)


def test_a_blocked_guard_never_blocks_a_reduction() -> None:
    # Usage close to requests: the rule lowers 1.5 to 1.0, with or without physical data.
    assert r.recommend_memory_scaling([r.NodeMemory("n1", 10 * GIB, 9 * GIB, 1.5)]).value == "1"
    assert (
        client.recommend_kube_client(client.ClientInputs(300, 5, 10, None, None)).value
        == "--kube-qps=50 --kube-burst=100"
    )
