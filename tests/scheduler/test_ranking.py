"""The incremental ranking gives exactly the verdicts a from-scratch filter gives.

Random sequences of filters (several request shapes, both node policies), commits, released
pods, re-registered nodes and changed candidate lists run through ``filter_pod`` with a ``Ranker``;
after every step the answer must equal ``filter_pod`` without one over a freshly built usage index.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.scheduler.engine.decision import FilterConfig, FilterResult, commit, filter_pod
from hami.scheduler.engine.device_config import NvidiaConfig
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.engine.ranking import Ranker
from hami.scheduler.engine.requests import PodRequest, pod_request
from hami.scheduler.engine.usage import UsageIndex, compute_usage
from hami.testing.builders import dev, pod, res
from hami.testing.engineinputs import node_state

SHAPES = (res(1, 1000), res(1, 3000, 30), res(1, 7000), res(2, 2000), res(1, pct=50), res(3, 1000))
POLICIES = ("binpack", "spread")


def decode(the_pod: dict[str, Any]) -> PodRequest:
    request = pod_request(the_pod, NvidiaConfig())
    assert request is not None, "the pod asks for a GPU"
    return request


def make_node(i: int, variant: int) -> NodeState:
    """Node ``n<i>``; ``variant`` changes its registration (health, a non-NVIDIA card, memory)."""
    devices = [
        dev(f"n{i}-g0", 8000 + 1000 * (i % 3), count=4),
        dev(f"n{i}-g1", 8000, count=4, index=1, health=variant % 3 != 1),
    ]
    if variant % 3 == 2:
        devices.append(dev(f"n{i}-g2", 16000, count=4, index=2, type="AMD"))
    return node_state(f"n{i}", *devices)


filters = st.tuples(
    st.just("filter"), st.integers(0, len(SHAPES) - 1), st.sampled_from(POLICIES), st.booleans()
)
steps = st.lists(
    st.one_of(
        filters, filters, filters,  # most steps filter, so rankings get reused
        st.tuples(st.just("release"), st.integers(0, 50)),
        st.tuples(st.just("reregister"), st.integers(0, 7), st.integers(0, 2)),
        st.tuples(st.just("candidates"), st.lists(st.integers(0, 8), max_size=9)),
    ),
    max_size=40,
)


def same(got: FilterResult, want: FilterResult) -> None:
    assert got.node == want.node
    assert got.devices == want.devices
    assert got.fits == want.fits
    assert list(got.failed.items()) == list(want.failed.items())
    assert got.events(9) == want.events(9)


@settings(max_examples=300, deadline=None)
@given(steps=steps, ranker_size=st.integers(1, 4), touch_log=st.integers(1, 20))
def test_incremental_ranking_matches_a_fresh_filter(
    steps: list[tuple[Any, ...]], ranker_size: int, touch_log: int,
) -> None:
    states = {i: make_node(i, 0) for i in range(8)}
    candidates = list(range(8))
    usage = UsageIndex(touch_log=touch_log)  # a short log: rankings also fall behind it
    ranks = Ranker(size=ranker_size)
    uids = 0
    for step in steps:
        kind = step[0]
        if kind == "filter":
            _, shape, policy, keep = step
            the_pod = pod(SHAPES[shape], uid=f"u{uids}", name=f"p{uids}")
            config = FilterConfig(node_policy=policy)
            nodes = [states[i] for i in candidates if i in states]
            ghosts = [f"n{i}" for i in candidates if i not in states]
            request = decode(the_pod)
            want = filter_pod(request, nodes, compute_usage(usage.pods()), None, config, unregistered=ghosts)
            got = filter_pod(request, nodes, usage, None, config, unregistered=ghosts, ranks=ranks)
            same(got, want)
            if keep and got.node is not None:
                commit(got, usage, None)
                uids += 1
        elif kind == "release":
            held = sorted(a.uid for a in usage.pods())
            if held:
                usage.remove(held[step[1] % len(held)])
        elif kind == "reregister":
            states[step[1]] = make_node(step[1], step[2])
        else:
            candidates = step[1]  # may repeat a node; index 8 is never registered


def test_a_bind_changes_only_its_node_and_the_order_follows_it() -> None:
    """Binpack over equal nodes: each committed pod raises its node's score, so it is chosen again."""
    nodes = [make_node(i, 0) for i in range(4)]
    usage = UsageIndex()
    ranks = Ranker()
    chosen = []
    for k in range(3):
        request = decode(pod(res(1, 1000), uid=f"u{k}"))
        result = filter_pod(request, nodes, usage, None, FilterConfig(), ranks=ranks)
        assert result.node is not None
        commit(result, usage, None)
        chosen.append(result.node)
    # All start empty (score 0): the tie goes to the node listed first, then binpack sticks to it.
    assert chosen == ["n0", "n0", "n0"]
    spread = [
        filter_pod(decode(pod(res(1, 1000), uid=f"s{k}")), nodes, usage, None,
                   FilterConfig(node_policy="spread"), ranks=ranks).node
        for k in range(2)
    ]
    assert spread == ["n1", "n1"]  # uncommitted: the emptiest node listed first, both times


def test_a_reregistered_node_leaves_and_rejoins_the_fitting_set() -> None:
    """Same shape, same candidate list: only the registration of n1 changes between the calls."""
    states = [make_node(i, 0) for i in range(4)]
    usage = UsageIndex()
    ranks = Ranker()
    two_cards = pod(res(2, 2000))
    config = FilterConfig()
    failed = []
    for variant in (0, 1, 2, 0):  # 1: a card goes unhealthy, so two cards no longer fit
        states[1] = make_node(1, variant)
        got = filter_pod(decode(two_cards), states, usage, None, config, ranks=ranks)
        same(got, filter_pod(decode(two_cards), states, UsageIndex(), None, config))
        failed.append(sorted(got.failed))
    assert failed == [[], ["n1"], [], []]


def test_a_ranker_moved_to_another_usage_index_starts_over() -> None:
    """Change numbers are per index: two indexes at the same number must not share verdicts."""
    nodes = [make_node(i, 0) for i in range(3)]
    ranks = Ranker()
    config = FilterConfig(node_policy="spread")
    loaded_n0, loaded_n1 = UsageIndex(), UsageIndex()
    a, b = decode(pod(res(1, 1000), uid="a")), decode(pod(res(1, 1000), uid="b"))
    commit(filter_pod(a, nodes, loaded_n0, None, config), loaded_n0, None)
    commit(filter_pod(b, nodes[1:], loaded_n1, None, config), loaded_n1, None)
    assert loaded_n0.seq == loaded_n1.seq == 1
    assert filter_pod(decode(pod(res(1, 1000))), nodes, loaded_n0, None, config, ranks=ranks).node == "n1"
    assert filter_pod(decode(pod(res(1, 1000))), nodes, loaded_n1, None, config, ranks=ranks).node == "n0"
