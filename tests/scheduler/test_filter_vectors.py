"""Behaviour vectors of §10 through ``filter_pod`` (scheduler, score and numa_sort tests).

Section signs (§) refer to docs/design/scheduler.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from tests.scheduler.builders import dev, node, pod, res, usage

from hami.scheduler.engine.decision import FilterConfig, FilterResult, commit, filter_pod
from hami.scheduler.engine.device_config import NvidiaConfig
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.usage import DeviceShare, PodAllocation, UsageIndex


def quota(namespace: str, **hard: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": "q"},
            "spec": {"hard": {f"limits.nvidia.com/{k}": v for k, v in hard.items()}}}


@dataclass
class Case:
    pod: dict[str, Any]
    nodes: list[NodeState]
    used: tuple[tuple[str, str, int, int, int], ...] = ()
    node_policy: str = "binpack"
    gpu_policy: str = "spread"
    quotas: list[dict[str, Any]] = field(default_factory=list)
    node: str | None = None  # expected chosen node
    devices: tuple[tuple[str, ...], ...] | None = None  # expected UUIDs per container
    any_of: tuple[str, ...] = ()  # accepted device UUIDs for a single-card pod (ties)
    failed: dict[str, str] | None = None
    error: str | None = None
    score: float | None = None


N1 = node("node1", dev("device1"), dev("device2", index=1))
N2 = node("node2", dev("device3"), dev("device4", index=1))
FILTER_USED = (("node1", "device1", 1, 2000, 25), ("node2", "device4", 1, 6000, 75))
REQ = res(1, 1000, 20)
FOUR = node("n4", *(dev(f"g{i}", index=i) for i in range(4)))
WEIGHTS_NODE = node("w", dev("gpu-a", count=4), dev("gpu-b", index=1, count=4))
WEIGHTS_USED = (("w", "gpu-a", 3, 1000, 0), ("w", "gpu-b", 1, 6000, 0))
NUMA_NODE = node("numa", dev("g0"), dev("g1", index=1, numa=1), dev("g2", index=2, numa=1))
NUMA_USED = (("numa", "g1", 1, 1000, 0), ("numa", "g2", 1, 1000, 0))
BIND = {"nvidia.com/numa-bind": "true"}
BINPACK = {"hami.io/gpu-scheduler-policy": "binpack"}
WEIGHTS = "hami.io/device-scoring-weights"

CASES: dict[str, Case] = {
    "Test_Filter/binpack_binpack": Case(pod(REQ), [N1, N2], FILTER_USED, "binpack", "binpack",
                                        node="node2", devices=(("device4",),)),
    "Test_Filter/binpack_spread": Case(pod(REQ), [N1, N2], FILTER_USED, "binpack", "spread",
                                       node="node2", any_of=("device3", "device4")),
    "Test_Filter/spread_binpack": Case(pod(REQ), [N1, N2], FILTER_USED, "spread", "binpack",
                                       node="node1", devices=(("device1",),)),
    "Test_Filter/spread_spread": Case(pod(REQ), [N1, N2], FILTER_USED, "spread", "spread",
                                      node="node1", devices=(("device2",),)),
    "Test_Filter/init_5000_app_4000_binpack": Case(
        pod(res(1, 4000, 20), init=(res(1, 5000, 20),)), [N1, N2], FILTER_USED, "binpack", "binpack",
        node="node2", devices=(("device3",), ("device3",))),
    "Test_calcScore/half_used_node_scores_15": Case(
        pod(res(1, 1000)), [node("h", dev("g0"))], (("h", "g0", 5, 4000, 50),), node="h",
        devices=(("g0",),), score=15.0),
    "Test_calcScore/init_larger_than_any_card": Case(
        pod(res(1, 1000), init=(res(1, 9000),)), [node("n", dev("a"), dev("b", index=1))],
        failed={"n": "2/2 CardInsufficientMemory"}),
    "Test_calcScore/2_2_CardInsufficientCore": Case(
        pod(res(1, 1000, 60)), [node("n", dev("a"), dev("b", index=1))],
        (("n", "a", 1, 0, 50), ("n", "b", 1, 0, 50)), failed={"n": "2/2 CardInsufficientCore"}),
    "Test_calcScore/multi_container_spread_across_devices": Case(
        pod(res(1, 5000), res(1, 5000)), [node("n", dev("a"), dev("b", index=1))],
        devices=(("b",), ("a",))),
    "Test_calcScore/non_gpu_container_keeps_its_slot": Case(
        pod({"resources": {}}, res(1, 1000)), [node("n", dev("a"))], devices=((), ("a",))),
    "Test_fitInDevices/NodeInsufficientDevice": Case(
        pod(res(3, 1000)), [node("n", dev("a"), dev("b", index=1))], failed={"n": "NodeInsufficientDevice"}),
    "Test_fitInDevices/device_type_filtering": Case(
        pod(res(1, 1000), annotations={"nvidia.com/use-gputype": "a100"}),
        [node("n", dev("t4", type="NVIDIA-Tesla T4"), dev("a100", index=1, type="NVIDIA A100-SXM4-40GB"))],
        devices=(("a100",),)),
    "Test_fitInCertainDevice/other_vendors_not_in_denominator": Case(
        pod(res(1, 9000)), [node("n", dev("g0"), dev("dcu0", type="DCU-Z100"), dev("mx", type="MetaX-C500"))],
        failed={"n": "1/1 CardInsufficientMemory"}),
    "Test_ResourceQuota/quota_stops_second_card": Case(
        pod(res(2, 1000)), [FOUR], quotas=[quota("default", gpumem="1500")],
        failed={"n4": "1/4 AllocatedCardsInsufficientRequest, 3/4 ResourceQuotaNotFit"}),
    "Test_ResourceQuota/quota_stops_every_card": Case(
        pod(res(1, 1000)), [FOUR], quotas=[quota("default", gpumem="500")],
        failed={"n4": "4/4 ResourceQuotaNotFit"}),
    "Test_ResourceQuota/core_quota": Case(
        pod(res(1, 1000, 50)), [FOUR], quotas=[quota("default", gpucores="40")],
        failed={"n4": "4/4 ResourceQuotaNotFit"}),
    "Test_ResourceQuota/multi_device_within_quota": Case(
        pod(res(2, 1000, 10)), [FOUR], quotas=[quota("default", gpumem="2000", gpucores="20")],
        node="n4", devices=(("g3", "g2"),)),
    "Test_ResourceQuota/other_namespace_unaffected": Case(
        pod(res(1, 1000)), [FOUR], quotas=[quota("elsewhere", gpumem="0")], node="n4"),
    "TestFitQuota/init_counted_as_peak_not_sum": Case(
        pod(res(1, 1000), init=(res(1, 1000),)), [node("one", dev("g0"))],
        quotas=[quota("default", gpumem="1000")], node="one", devices=(("g0",), ("g0",))),
    "TestCalcScoreRejectsInvalidDeviceScoringWeights": Case(
        pod(res(1, 1000), annotations={"hami.io/device-scoring-weights": "slot=1,core=-1,memory=1"}),
        [FOUR], error='calcScore failed invalid hami.io/device-scoring-weights annotation '
                      '"slot=1,core=-1,memory=1": "core" weight must not be negative for pod p1'),
    "TestCalcScoreUsesPodDeviceScoringWeights/slot": Case(
        pod(res(1, 1000), annotations={**BINPACK, WEIGHTS: "slot=1,core=0,memory=0"}),
        [WEIGHTS_NODE], WEIGHTS_USED, devices=(("gpu-a",),)),
    "TestCalcScoreUsesPodDeviceScoringWeights/memory": Case(
        pod(res(1, 1000), annotations={**BINPACK, WEIGHTS: "slot=0,core=0,memory=1"}),
        [WEIGHTS_NODE], WEIGHTS_USED, devices=(("gpu-b",),)),
    "TestCalcScoreUsesPodDeviceScoringWeightsForInitContainers": Case(
        pod(res(1, 1000), init=(res(1, 1000),),
            annotations={**BINPACK, "hami.io/device-scoring-weights": "slot=0,core=0,memory=1"}),
        [WEIGHTS_NODE], WEIGHTS_USED, devices=(("gpu-b",), ("gpu-b",))),
    "TestCalcScoreUsesDeviceScoringWeightsAsTopologyTieBreaker/slot": Case(
        pod(res(1, 1000), annotations={"hami.io/gpu-scheduler-policy": "topology-aware",
                                       "hami.io/device-scoring-weights": "slot=1,core=0,memory=0"}),
        [WEIGHTS_NODE], WEIGHTS_USED, devices=(("gpu-b",),)),
    "TestCalcScoreUsesDeviceScoringWeightsAsTopologyTieBreaker/memory": Case(
        pod(res(1, 1000), annotations={"hami.io/gpu-scheduler-policy": "topology-aware",
                                       "hami.io/device-scoring-weights": "slot=0,core=0,memory=1"}),
        [WEIGHTS_NODE], WEIGHTS_USED, devices=(("gpu-a",),)),
    "numa_sort/numa_bind_keeps_one_numa_node": Case(
        pod(res(2, 1000), annotations=BIND), [NUMA_NODE], NUMA_USED, devices=(("g2", "g1"),)),
    "numa_sort/without_numa_bind_idlest_card_first": Case(
        pod(res(2, 1000)), [NUMA_NODE], NUMA_USED, devices=(("g0", "g2"),)),
    "Test_Filter/unregistered_and_unfit_nodes_reported": Case(
        pod(res(1, 9000)), [node("small", dev("s0"))], failed={"small": "1/1 CardInsufficientMemory"}),
}


def run(case: Case) -> FilterResult:
    cfg = FilterConfig(node_policy=case.node_policy, gpu_policy=case.gpu_policy)
    quotas = QuotaManager(cfg.nvidia)
    for q in case.quotas:
        quotas.add_quota(q)
    return filter_pod(case.pod, case.nodes, usage(*case.used), quotas, cfg)


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_filter_vector(case: Case) -> None:
    got = run(case)
    assert got.requested
    assert got.error == case.error
    if case.failed is not None:
        assert got.node is None
        assert dict(got.failed) == case.failed
    if case.node is not None:
        assert got.node == case.node
    if case.devices is not None:
        assert tuple(tuple(d.uuid for d in c) for c in got.devices) == case.devices
    if case.any_of:
        assert len(got.devices) == 1 and len(got.devices[0]) == 1
        assert got.devices[0][0].uuid in case.any_of
    if case.score is not None:
        assert got.fits[-1][1] == pytest.approx(case.score)


def test_pod_without_gpu_passes_through() -> None:
    got = filter_pod(pod({"resources": {"limits": {"cpu": "1"}}}), [FOUR], UsageIndex(), None, FilterConfig())
    assert not got.requested and got.node is None and not got.failed


def test_unregistered_nodes_fail_with_hami_string() -> None:
    got = filter_pod(pod(res(1, 1000)), [FOUR], UsageIndex(), None, FilterConfig(), unregistered=["ghost"])
    assert got.node == "n4" and got.failed == {"ghost": "node unregistered"}


def test_filter_evicts_stale_entry() -> None:
    """Test_Filter_EvictsStaleEntry: a re-filter ignores the pod's own earlier reservation and quota."""
    cfg = FilterConfig()
    one = node("one", dev("g0"))
    index = UsageIndex()
    quotas = QuotaManager(NvidiaConfig())
    quotas.add_quota(quota("default", gpumem="7000"))
    old = PodAllocation("uid-1", "default", "p1", "one", (DeviceShare("g0", 7000, 0),))
    index.add(old)
    quotas.add_usage("default", old.shares)
    got = filter_pod(pod(res(1, 5000)), [one], index, quotas, cfg)
    assert got.node == "one" and got.replaced == old
    commit(got, index, quotas)
    assert index.node_usage("one") == {"g0": (1, 5000, 0)}
    entry = quotas.entry("default", "nvidia.com/gpumem")
    assert entry is not None and entry.used == 5000
    other = filter_pod(pod(res(1, 5000), uid="uid-2"), [one], index, quotas, cfg)
    assert other.failed == {"one": "1/1 ResourceQuotaNotFit"}


def test_events_follow_hami_formats() -> None:
    two = [node("a", dev("a0")), node("b", dev("b0"))]
    failed = filter_pod(pod(res(1, 9000)), two, UsageIndex(), None, FilterConfig())
    assert failed.events(3) == [("Warning", "2 nodes CardInsufficientMemory(a,b)"),
                                ("Warning", "no available node, 3 nodes do not meet")]
    ok = filter_pod(pod(res(1, 1000)), two, usage(("b", "b0", 1, 4000, 0)), None, FilterConfig())
    assert ok.events(3) == [("Normal", "find fit node(b), 1 nodes not fit, 2 nodes fit(a:0.00,b:6.00)")]
