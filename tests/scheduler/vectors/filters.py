"""``filter_pod`` over whole nodes, one case per HAMi scheduler, score and NUMA-sort test case (named
after it): the pod, the nodes, what other pods use, the policies and quotas, and the outcome."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hami.scheduler.engine.nodes import NodeState
from hami.testing.builders import dev, pod, res, resource_quota
from hami.testing.engineinputs import node_state


@dataclass
class Case:
    """Expected: ``node`` and ``devices`` (or ``any_of``), or ``failed`` nodes' reasons, or an ``error``."""

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


N1 = node_state("node1", dev("device1"), dev("device2", index=1))
N2 = node_state("node2", dev("device3"), dev("device4", index=1))
FILTER_USED = (("node1", "device1", 1, 2000, 25), ("node2", "device4", 1, 6000, 75))
REQ = res(1, 1000, 20)
FOUR = node_state("n4", *(dev(f"g{i}", index=i) for i in range(4)))
WEIGHTS_NODE = node_state("w", dev("gpu-a", count=4), dev("gpu-b", index=1, count=4))
WEIGHTS_USED = (("w", "gpu-a", 3, 1000, 0), ("w", "gpu-b", 1, 6000, 0))
NUMA_NODE = node_state("numa", dev("g0"), dev("g1", index=1, numa=1), dev("g2", index=2, numa=1))
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
        pod(res(1, 1000)), [node_state("h", dev("g0"))], (("h", "g0", 5, 4000, 50),), node="h",
        devices=(("g0",),), score=15.0),
    "Test_calcScore/init_larger_than_any_card": Case(
        pod(res(1, 1000), init=(res(1, 9000),)), [node_state("n", dev("a"), dev("b", index=1))],
        failed={"n": "2/2 CardInsufficientMemory"}),
    "Test_calcScore/2_2_CardInsufficientCore": Case(
        pod(res(1, 1000, 60)), [node_state("n", dev("a"), dev("b", index=1))],
        (("n", "a", 1, 0, 50), ("n", "b", 1, 0, 50)), failed={"n": "2/2 CardInsufficientCore"}),
    "Test_calcScore/multi_container_spread_across_devices": Case(
        pod(res(1, 5000), res(1, 5000)), [node_state("n", dev("a"), dev("b", index=1))],
        devices=(("b",), ("a",))),
    "Test_calcScore/non_gpu_container_keeps_its_slot": Case(
        pod({"resources": {}}, res(1, 1000)), [node_state("n", dev("a"))], devices=((), ("a",))),
    "Test_fitInDevices/NodeInsufficientDevice": Case(
        pod(res(3, 1000)), [node_state("n", dev("a"), dev("b", index=1))],
        failed={"n": "NodeInsufficientDevice"}),
    "Test_fitInDevices/device_type_filtering": Case(
        pod(res(1, 1000), annotations={"nvidia.com/use-gputype": "a100"}),
        [node_state("n", dev("t4", type="NVIDIA-Tesla T4"),
                    dev("a100", index=1, type="NVIDIA A100-SXM4-40GB"))],
        devices=(("a100",),)),
    "Test_fitInCertainDevice/other_vendors_not_in_denominator": Case(
        pod(res(1, 9000)),
        [node_state("n", dev("g0"), dev("dcu0", type="DCU-Z100"), dev("mx", type="MetaX-C500"))],
        failed={"n": "1/1 CardInsufficientMemory"}),
    "Test_ResourceQuota/quota_stops_second_card": Case(
        pod(res(2, 1000)), [FOUR], quotas=[resource_quota("default", gpumem="1500")],
        failed={"n4": "1/4 AllocatedCardsInsufficientRequest, 3/4 ResourceQuotaNotFit"}),
    "Test_ResourceQuota/quota_stops_every_card": Case(
        pod(res(1, 1000)), [FOUR], quotas=[resource_quota("default", gpumem="500")],
        failed={"n4": "4/4 ResourceQuotaNotFit"}),
    "Test_ResourceQuota/core_quota": Case(
        pod(res(1, 1000, 50)), [FOUR], quotas=[resource_quota("default", gpucores="40")],
        failed={"n4": "4/4 ResourceQuotaNotFit"}),
    "Test_ResourceQuota/multi_device_within_quota": Case(
        pod(res(2, 1000, 10)), [FOUR], quotas=[resource_quota("default", gpumem="2000", gpucores="20")],
        node="n4", devices=(("g3", "g2"),)),
    "Test_ResourceQuota/other_namespace_unaffected": Case(
        pod(res(1, 1000)), [FOUR], quotas=[resource_quota("elsewhere", gpumem="0")], node="n4"),
    "TestFitQuota/init_counted_as_peak_not_sum": Case(
        pod(res(1, 1000), init=(res(1, 1000),)), [node_state("one", dev("g0"))],
        quotas=[resource_quota("default", gpumem="1000")], node="one", devices=(("g0",), ("g0",))),
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
        pod(res(1, 9000)), [node_state("small", dev("s0"))], failed={"small": "1/1 CardInsufficientMemory"}),
}
