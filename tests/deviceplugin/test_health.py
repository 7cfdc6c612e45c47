from __future__ import annotations

import threading

import pytest

from hami.core.nvml import RemappedRows, RetiredPages
from hami.deviceplugin.health import (
    CHECK_ECC,
    CHECK_TEMPERATURE,
    CHECKS,
    DEVICE_LOST,
    ECC_DOUBLE_BIT,
    RETIRED_PAGES_PENDING,
    ROW_REMAP_FAILURE,
    TEMPERATURE_RECOVERY_MARGIN_C,
    TEMPERATURE_SLOWDOWN,
    XID_CRITICAL,
    HealthState,
    Reading,
    judge,
    parse_health_checks,
    parse_xid_policy,
)


def test_default_policy_ignores_application_xids() -> None:
    policy = parse_xid_policy("", "")
    assert [x for x in (13, 31, 43, 45, 68, 109) if policy.is_critical(x)] == []
    assert policy.is_critical(48) and policy.is_critical(79)


def test_disable_and_enable_lists() -> None:
    policy = parse_xid_policy("79, 48", "43")
    assert not policy.is_critical(79) and not policy.is_critical(48)
    assert policy.is_critical(43)  # an enable beats the built-in ignore list
    assert parse_xid_policy("all", "").checks_disabled
    assert parse_xid_policy("xids", "").checks_disabled


def test_bad_xid_list_names_the_variable() -> None:
    with pytest.raises(ValueError, match="DP_DISABLE_HEALTHCHECKS"):
        parse_xid_policy("48,abc", "")


def test_unhealthy_is_sticky_and_wakes_waiters() -> None:
    state = HealthState(["GPU-a", "GPU-b"])
    gen, snap = state.snapshot()
    assert snap == {"GPU-a": True, "GPU-b": True}
    seen: list[int | None] = []
    waiter = threading.Thread(target=lambda: seen.append(state.wait_change(gen, 30)))
    waiter.start()
    assert state.mark_unhealthy("GPU-a")
    waiter.join(30)
    assert seen == [gen + 1]
    assert not state.mark_unhealthy("GPU-a")  # no recovery, no repeated change
    assert not state.mark_unhealthy("GPU-unknown")
    state.close()
    assert state.wait_change(gen + 1, 30) is None


def test_opt_in_checks_parse_and_all_disables_them() -> None:
    assert parse_health_checks("") == frozenset()
    assert parse_health_checks(" ECC, temperature ") == {CHECK_ECC, CHECK_TEMPERATURE}
    assert parse_health_checks("all") == set(CHECKS)
    assert parse_health_checks("all", disable_env="all") == frozenset()
    assert parse_health_checks("ecc", disable_env="xids") == {CHECK_ECC}  # xids: HAMi's Xids only
    with pytest.raises(ValueError, match=r"unknown check\(s\) fan.*ecc, retired-pages, temperature"):
        parse_health_checks("ecc,fan")


ALL = frozenset(CHECKS)


def test_judge_marks_each_opt_in_reason_and_clears_it_when_nvml_says_so() -> None:
    sick = Reading(
        ecc_uncorrected=2,
        retired=RetiredPages(single_bit=0, double_bit=1, pending=True),
        remapped=RemappedRows(correctable=0, uncorrectable=3, pending=False, failure=True),
        temperature=91,
        slowdown=90,
    )
    active = judge(sick, ALL, {})
    assert set(active) == {ECC_DOUBLE_BIT, RETIRED_PAGES_PENDING, ROW_REMAP_FAILURE, TEMPERATURE_SLOWDOWN}
    assert active[TEMPERATURE_SLOWDOWN] == "temperature 91 C at or above the slowdown threshold 90 C"
    assert active[ECC_DOUBLE_BIT] == "2 uncorrected ECC errors since the last reset"
    reset = Reading(
        ecc_uncorrected=0,
        retired=RetiredPages(0, 1, pending=False),
        remapped=RemappedRows(0, 3, pending=False, failure=False),
        temperature=60,
        slowdown=90,
    )
    assert judge(reset, ALL, active) == {}
    # Only the opted-in checks count: HAMi's default sees nothing of this.
    assert judge(sick, frozenset(), {}) == {}
    assert set(judge(sick, frozenset({CHECK_TEMPERATURE}), {})) == {TEMPERATURE_SLOWDOWN}


def test_temperature_recovers_only_well_below_the_threshold() -> None:
    checks = frozenset({CHECK_TEMPERATURE})
    hot = judge(Reading(temperature=90, slowdown=90), checks, {})
    assert set(hot) == {TEMPERATURE_SLOWDOWN}
    assert judge(Reading(temperature=89, slowdown=90), checks, {}) == {}  # never was hot: nothing
    assert set(judge(Reading(temperature=86, slowdown=90), checks, hot)) == {TEMPERATURE_SLOWDOWN}
    assert judge(Reading(temperature=90 - TEMPERATURE_RECOVERY_MARGIN_C, slowdown=90), checks, hot) == {}


def test_unreadable_conditions_keep_their_state_and_a_lost_device_reads_nothing() -> None:
    active = {ECC_DOUBLE_BIT: "x", XID_CRITICAL: "sticky, not judge's business"}
    assert judge(Reading(), ALL, active) == {ECC_DOUBLE_BIT: "x"}  # ECC NOT_SUPPORTED: unchanged
    lost = judge(Reading(lost="GPU_IS_LOST"), ALL, active)
    assert lost == {ECC_DOUBLE_BIT: "x", DEVICE_LOST: "NVML no longer finds the device (GPU_IS_LOST)"}
    assert judge(Reading(ecc_uncorrected=0), ALL, lost) == {}
    # device-lost not opted in: a lost device changes nothing
    assert judge(Reading(lost="NOT_FOUND"), frozenset({CHECK_ECC}), {}) == {}


def test_reasons_accumulate_and_health_moves_only_when_the_answer_changes() -> None:
    state = HealthState(["GPU-a"])
    gen, _ = state.snapshot()
    assert state.set_reason("GPU-a", TEMPERATURE_SLOWDOWN, "hot")
    assert not state.set_reason("GPU-a", ECC_DOUBLE_BIT, "ecc")  # already unhealthy
    assert state.snapshot() == (gen + 1, {"GPU-a": False})
    assert not state.set_reason("GPU-a", TEMPERATURE_SLOWDOWN, None)
    assert state.reasons("GPU-a") == {ECC_DOUBLE_BIT: "ecc"}
    assert state.set_reason("GPU-a", ECC_DOUBLE_BIT, None)
    assert state.snapshot() == (gen + 2, {"GPU-a": True})
    assert not state.set_reason("GPU-unknown", ECC_DOUBLE_BIT, "x")
