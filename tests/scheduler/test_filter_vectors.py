"""``filter_pod`` replaying HAMi's scheduler, score and numa_sort test cases
(``tests.scheduler.vectors.filters``), and the filter's own edge cases."""

from __future__ import annotations

from typing import Any

import pytest

from hami.scheduler.engine.decision import FilterConfig, FilterResult, commit, filter_pod
from hami.scheduler.engine.device_config import NvidiaConfig
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.requests import PodRequest, pod_request
from hami.scheduler.engine.usage import DeviceShare, PodAllocation, UsageIndex
from hami.testing.builders import dev, pod, res, resource_quota
from hami.testing.engineinputs import node_state, usage
from tests.scheduler.vectors.filters import CASES, FOUR, Case


def decode(the_pod: dict[str, Any]) -> PodRequest:
    request = pod_request(the_pod, NvidiaConfig())
    assert request is not None, "the pod asks for a GPU"
    return request


def run(case: Case) -> FilterResult:
    cfg = FilterConfig(node_policy=case.node_policy, gpu_policy=case.gpu_policy)
    quotas = QuotaManager(cfg.nvidia)
    for q in case.quotas:
        quotas.add_quota(q)
    return filter_pod(decode(case.pod), case.nodes, usage(*case.used), quotas, cfg)


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_filter_vector(case: Case) -> None:
    got = run(case)
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
    assert pod_request(pod({"resources": {"limits": {"cpu": "1"}}}), NvidiaConfig()) is None
    assert pod_request(pod({"resources": {"limits": {"nvidia.com/gpu": "0"}}}), NvidiaConfig()) is None


def test_unregistered_nodes_fail_with_hami_string() -> None:
    got = filter_pod(
        decode(pod(res(1, 1000))), [FOUR], UsageIndex(), None, FilterConfig(), unregistered=["ghost"]
    )
    assert got.node == "n4" and got.failed == {"ghost": "node unregistered"}


def test_filter_evicts_stale_entry() -> None:
    """Test_Filter_EvictsStaleEntry: a re-filter ignores the pod's own earlier reservation and quota."""
    cfg = FilterConfig()
    one = node_state("one", dev("g0"))
    index = UsageIndex()
    quotas = QuotaManager(NvidiaConfig())
    quotas.add_quota(resource_quota("default", gpumem="7000"))
    old = PodAllocation("uid-1", "default", "p1", "one", (DeviceShare("g0", 7000, 0),))
    index.add(old)
    quotas.add_usage("default", old.shares)
    got = filter_pod(decode(pod(res(1, 5000), uid="uid-1")), [one], index, quotas, cfg)
    assert got.node == "one" and got.replaced == old
    commit(got, index, quotas)
    assert index.node_usage("one") == {"g0": (1, 5000, 0)}
    entry = quotas.entry("default", "nvidia.com/gpumem")
    assert entry is not None and entry.used == 5000
    other = filter_pod(decode(pod(res(1, 5000), uid="uid-2")), [one], index, quotas, cfg)
    assert other.failed == {"one": "1/1 ResourceQuotaNotFit"}


def test_events_follow_hami_formats() -> None:
    two = [node_state("a", dev("a0")), node_state("b", dev("b0"))]
    failed = filter_pod(decode(pod(res(1, 9000))), two, UsageIndex(), None, FilterConfig())
    assert failed.events(3) == [("Warning", "2 nodes CardInsufficientMemory(a,b)"),
                                ("Warning", "no available node, 3 nodes do not meet")]
    ok = filter_pod(decode(pod(res(1, 1000))), two, usage(("b", "b0", 1, 4000, 0)), None, FilterConfig())
    assert ok.events(3) == [("Normal", "find fit node(b), 1 nodes not fit, 2 nodes fit(a:0.00,b:6.00)")]
