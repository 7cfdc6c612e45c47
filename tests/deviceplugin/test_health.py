from __future__ import annotations

import threading

import pytest

from hami.deviceplugin.health import HealthState, parse_xid_policy


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
