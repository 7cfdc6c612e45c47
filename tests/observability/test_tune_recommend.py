"""Every row and branch of the tuning guide's tables, through the pure recommendation functions."""

from __future__ import annotations

import argparse

import pytest

from hami.tune import recommend as r
from hami.tune.main import build_parser
from hami.tune.promapi import PrometheusError, parse_result

GIB = 1024**3


# --- --kube-qps / --kube-burst ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        (1, "--kube-qps=5 --kube-burst=10"),
        (49, "--kube-qps=5 --kube-burst=10"),
        (50, "--kube-qps=20 --kube-burst=40"),
        (199, "--kube-qps=20 --kube-burst=40"),
        (200, "--kube-qps=50 --kube-burst=100"),
        (5000, "--kube-qps=50 --kube-burst=100"),
    ],
)
def test_client_tier_by_cluster_size(nodes: int, expected: str) -> None:
    rec = r.recommend_kube_client(r.ClientInputs(nodes, 5, 10, 0.0, 0.0))
    assert rec.value == expected
    assert rec.current == "--kube-qps=5 --kube-burst=10"


@pytest.mark.parametrize(("nodes", "timeout"), [(10, "15"), (100, "20"), (300, "30")])
def test_client_timeout_follows_the_tier(nodes: int, timeout: str) -> None:
    assert (
        r.recommend_kube_client(r.ClientInputs(nodes, None, None, None, None)).details["kube_timeout"]
        == timeout
    )


def test_throttled_client_steps_up_one_tier() -> None:
    rec = r.recommend_kube_client(r.ClientInputs(10, 5, 10, 0.2, 1.0))
    assert rec.value == "--kube-qps=20 --kube-burst=40"
    assert any("rate limiter" in reason for reason in rec.reasons)


def test_wait_at_the_threshold_is_not_throttled() -> None:
    assert (
        r.recommend_kube_client(r.ClientInputs(10, 5, 10, 0.05, None)).value == "--kube-qps=5 --kube-burst=10"
    )


def test_large_cluster_goes_to_the_upper_end_of_its_range() -> None:
    rec = r.recommend_kube_client(r.ClientInputs(300, 50, 100, 0.3, None))
    assert rec.value == "--kube-qps=100 --kube-burst=200"


def test_busy_client_steps_up_even_without_throttling() -> None:
    # 4.5 req/s is above 80% of the small tier's 5 QPS.
    rec = r.recommend_kube_client(r.ClientInputs(10, 5, 10, 0.0, 4.5))
    assert rec.value == "--kube-qps=20 --kube-burst=40"
    assert (
        r.recommend_kube_client(r.ClientInputs(10, 5, 10, 0.0, 3.9)).value == "--kube-qps=5 --kube-burst=10"
    )


def test_top_tier_stays_at_the_top() -> None:
    rec = r.recommend_kube_client(r.ClientInputs(1000, 100, 200, 1.0, 500.0))
    assert rec.value == "--kube-qps=100 --kube-burst=200"


# --- deviceMemoryScaling ----------------------------------------------------------------------------


def test_safe_ratio_is_the_guides_example() -> None:
    # §3.3: 10 pods × 8 GB requested, about 4 GB each at peak -> (80 / 40) × 0.9 = 1.8.
    assert r.safe_overcommit_ratio(80 * GIB, 40 * GIB) == pytest.approx(1.8)
    with pytest.raises(ValueError, match="positive"):
        r.safe_overcommit_ratio(80 * GIB, 0)


@pytest.mark.parametrize(
    ("ratio", "value"), [(0.5, 1.0), (0.99, 1.0), (1.0, 1.0), (1.26, 1.2), (1.8, 1.8), (2.0, 2.0), (3.5, 2.0)]
)
def test_scaling_is_clamped_to_the_table(ratio: float, value: float) -> None:
    assert r.scaling_for_ratio(ratio)[0] == value


def test_memory_scaling_for_the_guides_example() -> None:
    nodes = [r.NodeMemory("n1", 80 * GIB, 40 * GIB, 1.0, 0.5)]
    rec = r.recommend_memory_scaling(nodes)
    assert (rec.value, rec.current) == ("1.8", "1")
    assert rec.details == {"safe_ratio": "1.8000"}


def test_nodes_that_differ_from_the_global_value_get_a_nodeconfig_entry() -> None:
    nodes = [r.NodeMemory("inference", 80 * GIB, 30 * GIB), r.NodeMemory("training", 80 * GIB, 78 * GIB)]
    rec = r.recommend_memory_scaling(nodes)
    # Global (160 / 108) × 0.9 = 1.33 -> 1.3; inference alone 2.4 -> 2.0; training alone 0.92 -> 1.0.
    assert rec.value == "1.3"
    assert rec.details["node/inference"] == "2"
    assert rec.details["node/training"] == "1"


def test_physical_memory_pressure_on_an_overcommitted_node_forces_1_0() -> None:
    nodes = [
        r.NodeMemory("n1", 80 * GIB, 20 * GIB, 1.5, 0.95),
        r.NodeMemory("n2", 80 * GIB, 20 * GIB, 1.5, 0.3),
    ]
    rec = r.recommend_memory_scaling(nodes)
    assert rec.value == "1"
    assert any("§6.1" in reason for reason in rec.reasons)


def test_physical_pressure_without_overcommit_is_not_a_reason_to_reduce() -> None:
    nodes = [r.NodeMemory("n1", 80 * GIB, 40 * GIB, 1.0, 0.95)]
    assert r.recommend_memory_scaling(nodes).value == "1.8"


def test_no_usage_is_refused() -> None:
    rec = r.recommend_memory_scaling([r.NodeMemory("n1", 80 * GIB, 0)])
    assert rec.refused
    assert rec.missing == ("hami_vgpu_memory_used_bytes (no non-zero usage)",)
    assert r.recommend_memory_scaling([]).refused


def test_short_history_is_flagged() -> None:
    nodes = [r.NodeMemory("n1", 80 * GIB, 40 * GIB)]
    assert any(
        "a week" in reason for reason in r.recommend_memory_scaling(nodes, history_seconds=3600).reasons
    )
    assert not any(
        "a week" in x for x in r.recommend_memory_scaling(nodes, history_seconds=8 * 86400).reasons
    )


# --- deviceSplitCount -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gib", "nodes", "count"),
    [
        (40, 10, 5),
        (16, 10, 5),
        (15.9, 10, 10),
        (8, 10, 10),
        (7.9, 10, 20),
        (2, 10, 20),
        (1.9, 10, 50),
        (1, 199, 50),
        (1, 200, 30),
        (1, None, 30),
    ],
)
def test_split_table(gib: float, nodes: int | None, count: int) -> None:
    assert r.split_for_min_request(gib * GIB, nodes)[0] == count


def test_pending_pods_on_saturated_devices_raise_the_split() -> None:
    rec = r.recommend_split_count(r.SplitInputs(10 * GIB, 10, 10, 2, 1))
    assert (rec.value, rec.current) == ("20", "10")
    # The step starts from the larger of the table value and the current setting.
    assert r.recommend_split_count(r.SplitInputs(10 * GIB, 10, 30, 2, 1)).value == "50"
    assert r.recommend_split_count(r.SplitInputs(10 * GIB, 10, 50, 2, 1)).value == "50"


def test_pending_pods_without_saturated_devices_keep_the_table_value() -> None:
    rec = r.recommend_split_count(r.SplitInputs(10 * GIB, 10, 10, 2, 0))
    assert rec.value == "10"
    assert any("not the limit" in reason for reason in rec.reasons)
    assert r.recommend_split_count(r.SplitInputs(10 * GIB, 10, None, 0, 5)).value == "10"


# --- nodeLockExpire ---------------------------------------------------------------------------------


def test_quiet_cluster_keeps_the_default() -> None:
    rec = r.recommend_node_lock_expire(r.LockInputs(300, 0, 0.2, 0.5))
    assert (rec.value, rec.current) == ("5m0s", "5m0s")


def test_expired_locks_with_fast_binds_shorten_to_3m() -> None:
    assert r.recommend_node_lock_expire(r.LockInputs(300, 2, 0.2, 0.5)).value == "3m0s"


def test_long_lock_waits_shorten_to_3m() -> None:
    assert r.recommend_node_lock_expire(r.LockInputs(300, 0, 0.2, 90)).value == "3m0s"


def test_expired_locks_with_slow_binds_raise_to_8m() -> None:
    # p99 bind 100 s: 3 × 100 s >= the 5m expiry, so binds themselves outlive the lock.
    assert r.recommend_node_lock_expire(r.LockInputs(300, 1, 100, 5)).value == "8m0s"


def test_expiry_never_drops_below_three_binds_nor_exceeds_10m() -> None:
    # p99 bind 70 s -> floor 4m (3 × 70 s = 3.5m, whole minutes): 3m would cut binds short.
    assert r.recommend_node_lock_expire(r.LockInputs(600, 1, 70, 5)).value == "4m0s"
    # p99 bind 250 s -> floor 13m, capped at the guide's 10m.
    assert r.recommend_node_lock_expire(r.LockInputs(300, 1, 250, 5)).value == "10m0s"


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["--prometheus-url", "http://prometheus:9090", *argv])


@pytest.mark.parametrize(("text", "seconds"), [("5m", 300), ("300s", 300), ("1h", 3600), ("42", 42)])
def test_duration_flag(text: str, seconds: float) -> None:
    assert _args("--node-lock-expire", text).node_lock_expire.total_seconds() == seconds


@pytest.mark.parametrize(("flag", "value"), [("--node-lock-expire", "five minutes"), ("--window", "1.5h"),
                                             ("--window", "5 minutes")])
def test_bad_duration_flags_are_usage_errors(flag: str, value: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _args(flag, value)
    assert exc.value.code == 2
    assert f"argument {flag}: invalid duration {value!r}: want a " in capsys.readouterr().err


def test_window_takes_prometheus_durations() -> None:
    assert _args("--window", "1w").window == "1w" and _args().window == "7d"


# --- the API answer parser --------------------------------------------------------------------------


def test_parse_vector_and_scalar() -> None:
    vec = parse_result(
        {"resultType": "vector", "result": [{"metric": {"node": "n1"}, "value": [1.0, "2.5"]}]}
    )
    assert [(s.labels, s.value) for s in vec] == [({"node": "n1"}, 2.5)]
    assert [s.value for s in parse_result({"resultType": "scalar", "result": [1.0, "7"]})] == [7.0]
    with pytest.raises(PrometheusError, match="matrix"):
        parse_result({"resultType": "matrix", "result": []})
