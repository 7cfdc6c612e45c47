"""Every row and branch of the tuning guide's tables, through the pure recommendation functions.

Section signs (§) refer to docs/guides/tuning.md.
"""

from __future__ import annotations

import argparse
import re

import pytest

from hami.core.promapi import PrometheusError, parse_result
from hami.tune import compare, components, cores, values
from hami.tune import recommend as r
from hami.tune.client import ClientInputs, recommend_kube_client
from hami.tune.main import parse_args

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
    rec = recommend_kube_client(ClientInputs(nodes, 5, 10, 0.0, 0.0))
    assert rec.value == expected
    assert rec.current == "--kube-qps=5 --kube-burst=10"


@pytest.mark.parametrize(("nodes", "timeout"), [(10, "15"), (100, "20"), (300, "30")])
def test_client_timeout_follows_the_tier(nodes: int, timeout: str) -> None:
    assert (
        recommend_kube_client(ClientInputs(nodes, None, None, None, None)).details["kube_timeout"] == timeout
    )


def test_throttled_client_steps_up_one_tier() -> None:
    rec = recommend_kube_client(ClientInputs(10, 5, 10, 0.2, 1.0))
    assert rec.value == "--kube-qps=20 --kube-burst=40"
    assert any("rate limiter" in reason for reason in rec.reasons)


def test_wait_at_the_threshold_is_not_throttled() -> None:
    assert recommend_kube_client(ClientInputs(10, 5, 10, 0.05, None)).value == "--kube-qps=5 --kube-burst=10"


def test_large_cluster_goes_to_the_upper_end_of_its_range() -> None:
    rec = recommend_kube_client(ClientInputs(300, 50, 100, 0.3, None))
    assert rec.value == "--kube-qps=100 --kube-burst=200"


def test_busy_client_steps_up_even_without_throttling() -> None:
    # 4.5 req/s is above 80% of the small tier's 5 QPS.
    rec = recommend_kube_client(ClientInputs(10, 5, 10, 0.0, 4.5))
    assert rec.value == "--kube-qps=20 --kube-burst=40"
    assert recommend_kube_client(ClientInputs(10, 5, 10, 0.0, 3.9)).value == "--kube-qps=5 --kube-burst=10"


def test_top_tier_stays_at_the_top() -> None:
    rec = recommend_kube_client(ClientInputs(1000, 100, 200, 1.0, 500.0))
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
    nodes = [
        r.NodeMemory("inference", 80 * GIB, 30 * GIB, peak_physical_ratio=0.5),
        r.NodeMemory("training", 80 * GIB, 78 * GIB, peak_physical_ratio=0.5),
    ]
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
    return parse_args(["--prometheus-url", "http://prometheus:9090", *argv])


@pytest.mark.parametrize(("text", "seconds"), [("5m", 300), ("300s", 300), ("1h", 3600), ("42", 42)])
def test_duration_flag(text: str, seconds: float) -> None:
    assert _args("--node-lock-expire", text).node_lock_expire.total_seconds() == seconds


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--node-lock-expire", "five minutes"), ("--window", "1.5h"), ("--window", "5 minutes")],
)
def test_bad_duration_flags_are_usage_errors(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
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


# --- gpuCorePolicy and per-pod gpucores (§5, §6.1, §6.2) ---------------------------------------------


def test_overshoot_starts_above_1_1_times_the_limit() -> None:
    assert not cores.ContainerCores("ns/p/c", 33, 30).overshoots
    assert cores.ContainerCores("ns/p/c", 33.1, 30).overshoots
    # A 100% limit is no limit: SM use up to 100% of the card is not imprecise isolation.
    assert not cores.ContainerCores("ns/p/c", 100, 100).overshoots


@pytest.mark.parametrize(
    ("environment", "current", "expected"),
    [
        ("production", "default", "default"),
        ("production", "force", "force"),
        ("development", "default", "disable"),
    ],
)
def test_policy_without_overshoot_follows_the_environment(
    environment: str, current: str, expected: str
) -> None:
    rec = cores.recommend_policy([cores.ContainerCores("ns/p/c", 20, 30)], environment, current)
    assert rec.value == expected


def test_any_overshoot_forces_even_in_development() -> None:
    inside, over = cores.ContainerCores("ns/p/a", 20, 30), cores.ContainerCores("ns/p/b", 40, 30)
    assert cores.recommend_policy([inside, over], "development", "disable").value == "force"


@pytest.mark.parametrize(
    ("used", "limit", "expected"), [(45, 30, 55), (10, 50, 15), (1, 50, 5), (95, 60, 100)]
)
def test_gpucores_proposal_is_p95_with_headroom_in_steps_of_5(
    used: float, limit: float, expected: int
) -> None:
    assert cores.gpucores_for(cores.ContainerCores("ns/p/c", used, limit)) == expected


def test_gpucores_leaves_containers_between_half_and_all_of_their_limit() -> None:
    rec = cores.recommend_gpucores(
        [cores.ContainerCores("ns/p/c", 25, 50), cores.ContainerCores("ns/p/d", 50, 50)]
    )
    assert (rec.value, rec.changed) == ("as requested", False)


# --- deviceSplitCount from low utilisation (§6.1) -----------------------------------------------------


def test_low_utilisation_with_full_devices_raises_the_split_to_20() -> None:
    rec = r.recommend_split_count(r.SplitInputs(8 * GIB, 3, 10, 0, 1, 0.1))
    assert rec.value == "20"


@pytest.mark.parametrize(("utilisation", "saturated"), [(0.3, 1), (0.1, 0), (None, 1)])
def test_utilisation_rule_needs_low_use_and_a_full_device(
    utilisation: float | None, saturated: float
) -> None:
    assert r.recommend_split_count(r.SplitInputs(8 * GIB, 3, 10, 0, saturated, utilisation)).value == "10"


# --- the extender's resources (§2.3, §6.1) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        (49, "requests cpu=100m memory=128Mi, limits cpu=500m memory=512Mi"),
        (50, "requests cpu=200m memory=256Mi, limits cpu=1000m memory=1024Mi"),
        (200, "requests cpu=500m memory=512Mi, limits cpu=2000m memory=2048Mi"),
    ],
)
def test_scheduler_resources_by_cluster_size(nodes: int, expected: str) -> None:
    rec = components.recommend_scheduler_resources(components.SchedulerInputs(nodes, None, 0, None))
    assert rec.value == expected


def test_oom_kill_doubles_a_limit_already_at_2gi() -> None:
    current = components.Resources(500, 2000, 512, 2048)
    rec = components.recommend_scheduler_resources(components.SchedulerInputs(300, current, 1, None))
    assert rec.details == {"limits.memory": "4096Mi"}


def test_working_set_near_the_limit_raises_it_before_the_kill() -> None:
    current = components.Resources(100, 500, 128, 512)
    near = components.SchedulerInputs(10, current, 0, 0.9 * 512 * components.MIB)
    assert components.recommend_scheduler_resources(near).details == {"limits.memory": "2048Mi"}
    below = components.SchedulerInputs(10, current, 0, 0.89 * 512 * components.MIB)
    assert not components.recommend_scheduler_resources(below).changed


# --- monitor verbosity and HAMi-core's log level (§6.1) ------------------------------------------------


def test_monitor_debug_args_are_added_once() -> None:
    inputs = components.MonitorInputs(("n1", "n2"), ("n1",), 0, ("-v=4", "--x"))
    assert components.recommend_monitor_args(inputs).value == "-v=4 --x"


def test_region_skips_alone_call_for_debug_logs() -> None:
    inputs = components.MonitorInputs(("n1",), ("n1",), 3, ())
    assert components.recommend_monitor_args(inputs).value == "-v=4"


@pytest.mark.parametrize(
    ("level", "environment", "expected"),
    [(3, "production", "0"), (1, "production", "1"), (3, "development", "3")],
)
def test_log_level(level: int, environment: str, expected: str) -> None:
    assert components.recommend_log_level(level, environment, "--values").value == expected


# --- --values and --before/--after ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("devices:\n  nvidia:\n    gpuCorePolicy: strict\n", "gpuCorePolicy is 'strict'"),
        ("devices:\n  nvidia:\n    libCudaLogLevel: 9\n", "libCudaLogLevel is 9"),
        ("devicePlugin:\n  monitor:\n    extraArgs: -v=4\n", "extraArgs must be a list of strings"),
        ("devices: [a]\n", "devices.nvidia.gpuCorePolicy: 'nvidia' is inside a list"),
        ("- a\n", "must be a YAML mapping"),
        ("a: [\n", "not YAML"),
    ],
)
def test_bad_values_files_name_the_key(text: str, message: str) -> None:
    with pytest.raises(values.ValuesError, match=re.escape(message)):
        values.current(values.parse(text))


def test_instants_take_unix_seconds_and_iso_times() -> None:
    assert _args("--before", "1700000000", "--after", "2023-11-14T22:13:20Z").after == 1700000000.0
    assert _args("--time", "2023-11-14T22:13:20").time == 1700000000.0  # no zone: UTC


def test_compare_pairs_evidence_and_marks_changes() -> None:
    before = [r.Recommendation("x", "1", evidence=(r.Evidence("q", 1.0, "node=a"), r.Evidence("p", 2.0)))]
    after = [r.Recommendation("x", "2", evidence=(r.Evidence("q", 1.0, "node=a"), r.Evidence("n", 3.0)))]
    rows = {(row.quantity, row.before, row.after) for row in compare.compare(before, after)}
    assert rows == {("recommendation", "1", "2"), ("q {node=a}", "1", "1"), ("p", "2", "no data"),
                    ("n", "no data", "3")}  # fmt: skip
