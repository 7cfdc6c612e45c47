"""The replay under each setting hami-tune simulate can change, on snapshots small enough to reason about."""

from __future__ import annotations

import pytest

from hami.core.snapshot import model as snap
from hami.testing.whatif import T0, node, pod, snapshot
from hami.tune.simulate.measures import fidelity, summarise
from hami.tune.simulate.records import PodRun, ReplayResult
from hami.tune.simulate.replay import replay
from hami.tune.simulate.scenario import CURRENT, Scenario, ScenarioError, parse_set


def runs(result: ReplayResult) -> dict[str, PodRun]:
    return {run.pod.name: run for run in result.runs}


def test_split_count_limits_pods_per_card() -> None:
    s = snapshot([node("n1", 16000, count=2)], [pod(f"p{i}", i, mem=1000) for i in range(3)])
    current = summarise(replay(s, CURRENT))
    assert (current.placed, current.pending_end) == (2, 1)
    more = summarise(replay(s, parse_set("deviceSplitCount=3")))
    assert (more.placed, more.pending_end) == (3, 0)
    one = summarise(replay(s, parse_set("deviceSplitCount@n1=1")))
    assert one.placed == 1


def test_memory_scaling_is_applied_to_physical_memory_and_shows_over_commit() -> None:
    # Registered 12000 MiB at scaling 1.5: 8000 MiB physical.
    s = snapshot([node("n1", 12000, scaling=1.5)], [pod(f"p{i}", i, mem=6000) for i in range(3)])
    current = replay(s, CURRENT)
    assert summarise(current).placed == 2
    assert current.cluster.physical_mib == {"n1-gpu0": 8000}
    assert summarise(current).headroom_mib == 8000 - 12000
    assert summarise(current).overcommitted_cards == 1
    # 1.0: the card registers its 8000 MiB; one pod fits, and nothing is promised past physical.
    safe = summarise(replay(s, parse_set("deviceMemoryScaling=1")))
    assert (safe.placed, safe.headroom_mib, safe.overcommitted_cards) == (1, 2000, 0)
    # 2.25: 18000 MiB, all three fit, 10000 MiB past physical.
    bold = summarise(replay(s, parse_set("deviceMemoryScaling=2.25")))
    assert (bold.placed, bold.headroom_mib, bold.mem_physical_peak) == (3, -10000, 18000 / 8000)


def test_a_waiting_pod_is_placed_when_a_departure_frees_its_card() -> None:
    s = snapshot([node("n1", 8000)], [pod("a", 0, mem=6000, until=100), pod("b", 10, mem=6000)])
    b = runs(replay(s, CURRENT))["b"]
    assert (b.node, b.placed_at) == ("n1", T0 + 100)
    summary = summarise(replay(s, CURRENT))
    assert (summary.waited, summary.wait_max) == (1, 90)


def test_a_pod_runs_as_long_as_it_ran_in_the_snapshot_from_whenever_it_is_placed() -> None:
    # b ran 50 s in the snapshot; placed at 100 here, it leaves at 150 and c gets the card then.
    s = snapshot(
        [node("n1", 8000)],
        [
            pod("a", 0, mem=6000, until=100),
            pod("b", 10, mem=6000, until=60, placed=("n1", ["n1-gpu0"])),
            pod("c", 20, mem=6000),
        ],
    )
    got = runs(replay(s, CURRENT))
    assert (got["b"].placed_at, got["b"].left_at) == (T0 + 100, T0 + 150)
    assert got["c"].placed_at == T0 + 150


def test_node_policy_binpack_fills_a_node_spread_balances() -> None:
    s = snapshot([node("n1", 8000), node("n2", 8000)], [pod("a", 0, mem=1000), pod("b", 1, mem=1000)])
    assert {run.node for run in replay(s, CURRENT).runs} == {"n1"}
    assert {run.node for run in replay(s, parse_set("nodeSchedulerPolicy=spread")).runs} == {"n1", "n2"}
    # A pod's own annotation wins over the scenario, as it wins over the scheduler's flag.
    pinned = [
        pod("a", 0, mem=1000),
        pod("b", 1, mem=1000, annotations={"hami.io/node-scheduler-policy": "binpack"}),
    ]
    s = snapshot([node("n1", 8000), node("n2", 8000)], pinned)
    got = runs(replay(s, parse_set("policy=spread")))
    assert got["a"].node == got["b"].node


def test_gpu_policy_decides_the_card() -> None:
    s = snapshot([node("n1", 8000, 8000)], [pod("a", 0, mem=1000), pod("b", 1, mem=1000)])
    spread = replay(s, CURRENT)
    assert len({run.devices[0][0].uuid for run in spread.runs}) == 2
    binpack = replay(s, parse_set("gpuSchedulerPolicy=binpack"))
    assert len({run.devices[0][0].uuid for run in binpack.runs}) == 1


def test_a_stuck_lock_holds_binds_until_it_expires_under_the_scenario() -> None:
    lock = snap.Lock("n1", T0 - 60, "gone/crashed-bind")
    s = snapshot([node("n1", 8000)], [pod("a", 0, mem=1000)], locks=[lock], lock_expire=300)
    a = runs(replay(s, CURRENT))["a"]
    # HAMi's filter keeps choosing n1; binds fail until the lock expires at T0 + 240, retried with
    # kube-scheduler's back-off (1 s doubling to 10 s), so the pod is placed within 10 s after.
    assert a.node == "n1" and T0 + 240 <= (a.placed_at or 0) < T0 + 250
    assert a.bind_failures == 5 + 22  # refused at 0, 1, 3, 7 and 15 s, then every 10 s to 235 s
    short = runs(replay(s, parse_set("nodeLockExpire=2m")))["a"]
    assert T0 + 60 <= (short.placed_at or 0) < T0 + 70
    current, alt = summarise(replay(s, CURRENT)), summarise(replay(s, parse_set("nodeLockExpire=2m")))
    assert (current.locked_node_seconds, alt.locked_node_seconds) == (240, 60)


def test_a_lock_released_by_its_owner_does_not_last_longer_under_a_longer_expiry() -> None:
    lock = snap.Lock("n1", T0 - 10, "ns/slow-bind", released=T0 + 20)
    s = snapshot([node("n1", 8000)], [pod("a", 0, mem=1000)], locks=[lock], lock_expire=300)
    longer = runs(replay(s, parse_set("nodeLockExpire=10m")))["a"]
    assert T0 + 20 <= (longer.placed_at or 0) < T0 + 30


def test_pods_placed_outside_the_scheduler_keep_their_cards_in_every_scenario() -> None:
    fixed = pod("by-hand", 0, mem=8000, cores=100, placed=("n1", ["n1-gpu0"]), scheduled=-1)
    s = snapshot([node("n1", 8000, 8000)], [fixed, pod("a", 5, mem=1000, cores=100)])
    for scenario in (CURRENT, parse_set("gpuSchedulerPolicy=binpack"), parse_set("deviceSplitCount=1")):
        got = runs(replay(s, scenario))
        assert got["by-hand"].fixed and got["by-hand"].devices[0][0].uuid == "n1-gpu0"
        assert got["a"].devices[0][0].uuid == "n1-gpu1"
    # They are not the scheduler's decisions: fidelity leaves them out.
    assert fidelity(replay(s, CURRENT)).compared == 1


def test_a_pod_deleted_while_waiting_leaves_the_queue() -> None:
    s = snapshot([node("n1", 8000)], [pod("big", 0, mem=9000, until=600), pod("small", 10, mem=1000)])
    summary = summarise(replay(s, CURRENT))
    assert (summary.placed, summary.pending_end, summary.never_placed) == (1, 0, 1)


def test_quota_freed_in_a_namespace_retries_its_pods_on_every_node() -> None:
    # a (team) only fits n2; b (team) waits for quota. When a leaves n2, binpack puts b on n1, the
    # fuller node: a retry over the freed node alone would have put it on n2.
    quota = snap.Quota("team", "q", {"limits.nvidia.com/gpumem": "3500"})
    fixed = pod("other", 0, mem=6000, placed=("n1", ["n1-gpu0"]), scheduled=-1, namespace="other")
    s = snapshot(
        [node("n1", 8000), node("n2", 8000)],
        [fixed, pod("a", 1, mem=3000, until=100, namespace="team"), pod("b", 10, mem=1000, namespace="team")],
        quotas=[quota],
    )
    got = runs(replay(s, CURRENT))
    assert got["a"].node == "n2"
    assert (got["b"].node, got["b"].placed_at) == ("n1", T0 + 100)


def test_fragmentation_counts_free_memory_no_typical_request_can_use() -> None:
    # Typical request 3000 MiB; the first card keeps 2000 MiB free that no such pod can use.
    s = snapshot(
        [node("n1", 8000, 8000)],
        [pod(f"p{i}", i, mem=3000) for i in range(2)] + [pod("q", 2, mem=3000)],
        end=10,
        node_policy="binpack",
    )
    result = replay(s, parse_set("gpuSchedulerPolicy=binpack"))
    last = result.samples[-1]
    assert (last.free_mib, last.stranded_mib) == (16000 - 9000, 2000)


def test_invalid_pods_are_reported_not_retried() -> None:
    bad = pod("bad", 0, mem=1000, annotations={"hami.io/device-scoring-weights": "slot=x"})
    run = runs(replay(snapshot([node("n1", 8000)], [bad]), CURRENT))["bad"]
    assert run.error.startswith("calcScore failed") and run.attempts == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("deviceSplitCount=0", "want a whole number from 1 to 1000"),
        ("deviceMemoryScaling=-1", "want a number greater than 0"),
        ("deviceMemoryScaling=1e9", "at most 100"),
        ("deviceMemoryScaling=nan", "want a number greater than 0"),
        ("nodeSchedulerPolicy=random", "want one of binpack, spread"),
        ("gpuSchedulerPolicy=bestfit", "unknown 'bestfit'"),
        ("nodeLockExpire=soon", "nodeLockExpire=soon"),
        ("nodeLockExpire=0s", "must be longer than 0"),
        ("policy", "want key=value"),
        ("splitCount=5", "want key=value with key one of"),
        ("policy@n1=spread", "only deviceMemoryScaling and deviceSplitCount take @NODE"),
        ("deviceSplitCount=5,deviceSplitCount=6", "given twice"),
    ],
)
def test_bad_settings_say_what_is_accepted(text: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_set(text)


def test_settings_combine_in_one_set() -> None:
    s = parse_set(
        "deviceSplitCount=20,gpuSchedulerPolicy=binpack,numa,nodeLockExpire=3m,deviceMemoryScaling@a=2"
    )
    assert s == Scenario(
        name="deviceSplitCount=20,gpuSchedulerPolicy=binpack,numa,nodeLockExpire=3m,deviceMemoryScaling@a=2",
        split_count=20,
        gpu_policy="binpack,numa",
        node_lock_expire=180.0,
        node_memory_scaling={"a": 2.0},
    )
