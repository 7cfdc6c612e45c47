"""hami-tune defrag: the plan (pure) and the command against Debian's real Prometheus."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from hami.testing import prometheus
from hami.tune import defrag
from hami.tune.main import main

GIB = 1024**3
STEP = 60
END = (int(time.time()) // STEP) * STEP - STEP
SCH = 'job="hami-scheduler",instance="s1:9395"'
KSM = 'job="kube-state-metrics",instance="ksm:8080"'


def _card(node: str, reserved: float, slots: int = 8) -> defrag.Card:
    return defrag.Card(node, f"GPU-{node}", "NVIDIA-A100", 40 * GIB, reserved * GIB, slots, 10)


def _tenant(ns: str, pod: str, node: str, gib: float) -> defrag.Tenant:
    return defrag.Tenant(ns, pod, node, f"GPU-{node}", gib * GIB)


def test_drains_the_cheapest_node_whose_pods_fit_elsewhere() -> None:
    cards = [_card("n1", 20), _card("n2", 30), _card("n3", 5)]
    tenants = [
        _tenant("ns1", "a", "n1", 10),
        _tenant("ns1", "b", "n1", 10),
        _tenant("ns2", "c", "n2", 30),
        _tenant("ns3", "d", "n3", 5),
    ]
    p = defrag.plan(cards, tenants, [8 * GIB, 40 * GIB])
    # 8 GiB fits n2's free 10 GiB now, so n2 is kept; n3 has one pod, which n1 can take.
    assert p.fit_now == [8 * GIB]
    assert [(s.node, s.pods, s.serves) for s in p.steps] == [("n3", ["ns3/d"], [40 * GIB])]
    assert p.unserved == []


def test_a_node_whose_pods_have_nowhere_to_go_is_skipped() -> None:
    cards = [_card("n1", 35), _card("n2", 35)]
    tenants = [_tenant("ns1", "a", "n1", 35), _tenant("ns2", "b", "n2", 35)]
    p = defrag.plan(cards, tenants, [40 * GIB])
    assert p.steps == []
    assert p.unserved == [40 * GIB]


def test_no_slot_means_no_fit_and_nothing_pending_means_nothing_to_drain() -> None:
    # 39 GiB free but every split slot taken: the request does not fit, and the pod has nowhere to go.
    p = defrag.plan([_card("n1", 1, slots=0)], [_tenant("ns1", "a", "n1", 1)], [GIB])
    assert (p.fit_now, p.steps, p.unserved) == ([], [], [GIB])
    assert "nothing to drain" in defrag.to_text(defrag.plan([_card("n1", 0)], [], []))


def _series() -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    for node, reserved in (("n1", 20), ("n2", 30), ("n3", 5)):
        dev = f'node="{node}",device_uuid="GPU-{node}",device_index="0",device_type="NVIDIA-A100"'
        out += [
            (f"hami_gpu_memory_limit_bytes{{{SCH},{dev}}}", 40 * GIB),
            (f'hami_gpu_memory_allocated_bytes{{{SCH},{dev},device_cores="0"}}', reserved * GIB),
            (f"hami_gpu_split_limit{{{SCH},{dev}}}", 10),
            (f"hami_gpu_shared_count{{{SCH},{dev}}}", 2),
        ]
    for ns, pod, node, gib in (
        ("ns1", "a", "n1", 10),
        ("ns1", "b", "n1", 10),
        ("ns2", "c", "n2", 30),
        ("ns3", "d", "n3", 5),
    ):
        who = f'namespace="{ns}",pod="{pod}",node="{node}",container_index="0",device_uuid="GPU-{node}"'
        out.append((f"hami_vgpu_memory_allocated_bytes{{{SCH},{who}}}", gib * GIB))
    for ns, pod, pending, mib in (
        ("ns9", "big", 1, 40960),
        ("ns9", "small", 1, 8192),
        ("ns1", "a", 0, 10240),
    ):
        out.append((f'kube_pod_status_phase{{{KSM},namespace="{ns}",pod="{pod}",phase="Pending"}}', pending))
        ctr = f'{KSM},namespace="{ns}",pod="{pod}",container="main"'
        out.append(
            (f'kube_pod_container_resource_requests{{{ctr},resource="nvidia_com_gpu",unit="integer"}}', 1)
        )
        out.append(
            (
                f'kube_pod_container_resource_requests{{{ctr},resource="nvidia_com_gpumem",unit="integer"}}',
                mib,
            )
        )
    return out


@pytest.fixture(scope="module")
def prom_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not prometheus.available():
        pytest.skip("prometheus/promtool not installed")
    work = tmp_path_factory.mktemp("prom")
    data = work / "data"
    data.mkdir()
    samples = [(name, float(v), float(END - i * STEP)) for name, v in _series() for i in range(5, -1, -1)]
    prometheus.backfill_openmetrics(prometheus.openmetrics(samples), data, work)
    with prometheus.PrometheusServer(data) as server:
        yield server.url


def test_defrag_from_real_prometheus(prom_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["defrag", "--prometheus-url", prom_url, "--time", str(END)]) == 0
    out = capsys.readouterr().out
    assert "pending requests: 40.0 GiB, 8.0 GiB" in out
    assert "1. drain n3: move 1 pod(s) (ns3/d), 5.0 GiB; frees 1 card(s) for 40.0 GiB" in out


def test_defrag_without_the_scheduler_series(prom_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["defrag", "--prometheus-url", prom_url, "--time", str(END), "--scheduler-job", "x"]) == 3
    assert 'no hami_gpu_memory_limit_bytes{job="x"}' in capsys.readouterr().err
