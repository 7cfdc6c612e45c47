"""Hypothesis properties: allocations respect capacity, exclusive is alone, quotas hold, fast == faithful."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.scheduler.engine.decision import FilterConfig, commit, filter_pod
from hami.scheduler.engine.device_config import NvidiaConfig
from hami.scheduler.engine.fit import PodContext, fit_node, fits_quickly
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.engine.policy import parse_gpu_policy, parse_scoring_weights
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.requests import PodRequest, pod_request
from hami.scheduler.engine.usage import DeviceShare, PodAllocation, UsageIndex
from hami.testing.builders import dev, pod, res
from hami.testing.engineinputs import node_state


def decode(the_pod: dict[str, Any]) -> PodRequest:
    request = pod_request(the_pod, NvidiaConfig())
    assert request is not None, "the pod asks for a GPU"
    return request

POLICIES = st.sampled_from(["spread", "binpack", "mutex", "topology-aware", "numa", "binpack,numa"])


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeState], UsageIndex]:
    nodes: list[NodeState] = []
    index = UsageIndex()
    for n in range(draw(st.integers(1, 3))):
        devices = []
        for i in range(draw(st.integers(1, 4))):
            mem = draw(st.sampled_from([4000, 8000, 16000]))
            count = draw(st.integers(1, 4))
            devices.append(dev(f"n{n}-g{i}", mem, count=count, index=i, numa=draw(st.integers(0, 1)),
                               health=draw(st.booleans()) or draw(st.booleans())))
            slots = draw(st.integers(0, count))
            if slots:
                used_mem = draw(st.integers(0, mem))
                used_cores = draw(st.integers(0, 100))
                index.add(PodAllocation(f"h{n}-{i}", "other", "h", f"n{n}",
                                        (DeviceShare(f"n{n}-g{i}", used_mem, used_cores, slots),)))
        nodes.append(node_state(f"n{n}", *devices))
    return nodes, index


@st.composite
def pods(draw: st.DrawFn, uid: str = "uid-x") -> dict[str, Any]:
    def container() -> dict[str, Any]:
        use_pct = draw(st.booleans())
        return res(draw(st.integers(1, 3)),
                   None if use_pct else draw(st.integers(0, 9000)),
                   draw(st.sampled_from([None, 0, 10, 50, 100, 120])),
                   draw(st.integers(0, 100)) if use_pct else None)
    apps = [container() for _ in range(draw(st.integers(1, 2)))]
    inits = tuple(container() for _ in range(draw(st.integers(0, 1))))
    annotations = {"hami.io/gpu-scheduler-policy": draw(POLICIES)}
    if draw(st.booleans()):
        annotations["nvidia.com/numa-bind"] = "true"
    return pod(*apps, init=inits, annotations=annotations, uid=uid)


def capacity_ok(nodes: list[NodeState], index: UsageIndex) -> None:
    for n in nodes:
        usage = index.node_usage(n.name)
        for d in n.devices:
            slots, mem, cores = usage.get(d.id, (0, 0, 0))
            assert slots <= d.count and mem <= d.devmem and cores <= d.devcore, (n.name, d.id, usage)


def within(nodes: list[NodeState], index: UsageIndex) -> bool:
    try:
        capacity_ok(nodes, index)
    except AssertionError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(clusters(), pods())
def test_allocation_never_exceeds_memory_cores_or_split_count(cluster: tuple[list[NodeState], UsageIndex],
                                                              the_pod: dict[str, Any]) -> None:
    nodes, index = cluster
    if not within(nodes, index):
        return
    result = filter_pod(decode(the_pod), nodes, index, None, FilterConfig())
    commit(result, index, None)
    capacity_ok(nodes, index)


@settings(max_examples=200, deadline=None)
@given(clusters(), st.lists(pods(), min_size=1, max_size=4))
def test_exclusive_card_is_alone(cluster: tuple[list[NodeState], UsageIndex],
                                 others: list[dict[str, Any]]) -> None:
    nodes, index = cluster
    exclusive = pod(res(1, cores=100), uid="exclusive")
    before = {n.name: index.node_usage(n.name) for n in nodes}
    result = filter_pod(decode(exclusive), nodes, index, None, FilterConfig())
    if result.node is None:
        return
    card = result.devices[0][0].uuid
    assert card not in before[result.node], "an exclusive pod joined a card already in use"
    commit(result, index, None)
    for i, other in enumerate(others):
        other["metadata"]["uid"] = f"other-{i}"
        verdict = filter_pod(decode(other), nodes, index, None, FilterConfig())
        assert all(d.uuid != card for c in verdict.devices for d in c), "a pod joined an exclusive card"
        commit(verdict, index, None)


@settings(max_examples=200, deadline=None)
@given(clusters(), st.lists(pods(), min_size=1, max_size=5), st.integers(0, 20000), st.integers(0, 300))
def test_quota_is_never_exceeded(cluster: tuple[list[NodeState], UsageIndex], sequence: list[dict[str, Any]],
                                 mem_limit: int, core_limit: int) -> None:
    nodes, index = cluster
    quotas = QuotaManager(NvidiaConfig())
    quotas.add_quota({"metadata": {"namespace": "default"}, "spec": {"hard": {
        "limits.nvidia.com/gpumem": str(mem_limit), "limits.nvidia.com/gpucores": str(core_limit)}}})
    for i, the_pod in enumerate(sequence):
        the_pod["metadata"]["uid"] = f"q-{i}"
        commit(filter_pod(decode(the_pod), nodes, index, quotas, FilterConfig()), index, quotas)
        mem = quotas.entry("default", "nvidia.com/gpumem")
        cores = quotas.entry("default", "nvidia.com/gpucores")
        assert mem is not None and mem.used <= mem_limit
        assert cores is not None and cores.used <= core_limit


@settings(max_examples=400, deadline=None)
@given(clusters(), pods())
def test_quick_verdict_matches_faithful_fit(cluster: tuple[list[NodeState], UsageIndex],
                                            the_pod: dict[str, Any]) -> None:
    nodes, index = cluster
    request = decode(the_pod)
    ctx = PodContext(request=request, policy=parse_gpu_policy(request.options.gpu_policy or "spread"),
                     weights=parse_scoring_weights(None), quota=None)
    if not ctx.order_free:
        return
    for n in nodes:
        faithful = fit_node(index.view(n), ctx)
        quick = fits_quickly(index.view(n), ctx)
        assert quick == (faithful if isinstance(faithful, str) else True)
