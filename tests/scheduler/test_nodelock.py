"""NodeLocker (§1.5) against the API emulator: backoff exhaustion, legacy locks, owner checks,
re-entrancy and malformed values. Sleeps are recorded instead of slept.

Section signs (§) refer to docs/design/scheduler-annotations.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from hami.core.codec.nodelock import NodeLock, format_node_lock, format_rfc3339
from hami.scheduler.extender.main import build_parser
from hami.scheduler.extender.metrics import SchedulerMetrics
from hami.scheduler.extender.nodelock import INITIAL, JITTER, NodeLocker, NodeLockError, default_timeout
from hami.testing.builders import node, pod
from hami.testing.kubeapi import KubeAPIServer

LOCK = "hami.io/mutex.lock"
NOW = datetime.now().astimezone().replace(microsecond=0)


def _node(name: str, lock: str | None = None) -> dict[str, Any]:
    return node(name, annotations={LOCK: lock} if lock is not None else {})


def _lock_value(api: KubeAPIServer, node: str) -> str | None:
    stored = api.store.get("nodes", node)
    assert stored is not None
    value: str | None = (stored["metadata"].get("annotations") or {}).get(LOCK)
    return value


class Locker:
    def __init__(self, api_client: client.ApiClient) -> None:
        self.sleeps: list[float] = []
        self.registry = CollectorRegistry()
        self.locker = NodeLocker(
            api_client,
            SchedulerMetrics(self.registry),
            timedelta(minutes=5),
            now=lambda: NOW,
            sleep=self.sleeps.append,
        )

    def expired(self, cause: str) -> float:
        value = self.registry.get_sample_value("hami_scheduler_node_lock_expired_total", {"cause": cause})
        return value or 0.0


@pytest.fixture
def locker(kube_client: client.ApiClient) -> Iterator[Locker]:
    yield Locker(kube_client)


def test_persistent_409_exhausts_the_backoff_with_hamis_error(
    kube_api: KubeAPIServer, locker: Locker
) -> None:
    kube_api.store.put(_node("n1"))
    kube_api.faults.add(method="PATCH", path=r"/nodes/n1$", status=409, times=None)
    kube_api.requests.clear()
    with pytest.raises(NodeLockError) as err:
        locker.locker.lock_node("n1", "default", "p1")
    text = str(err.value)
    assert text.startswith(
        "failed to set node lock (node=n1, retry strategy={Duration:100ms Factor:2 Jitter:0.5 Steps:5}): 409"
    ), text
    assert not err.value.contention  # a Conflict is retried, never reported as contention
    assert kube_api.requests.count(method="PATCH", path=r"/nodes/n1$") == 5
    # client-go wait.Backoff: 4 sleeps between 5 steps, 100ms doubling, up to +50% jitter each.
    assert len(locker.sleeps) == 4
    for step, slept in enumerate(locker.sleeps):
        base = INITIAL * 2**step
        assert base <= slept <= base * (1 + JITTER)
    assert _lock_value(kube_api, "n1") is None


def test_expired_legacy_lock_is_taken_over(kube_api: KubeAPIServer, locker: Locker) -> None:
    legacy = format_rfc3339(NOW - timedelta(minutes=6))
    assert "," not in legacy
    kube_api.store.put(_node("n1", legacy))
    locker.locker.lock_node("n1", "default", "p1")
    assert _lock_value(kube_api, "n1") == format_node_lock(NodeLock(NOW, "default", "p1"))
    assert locker.expired("expired") == 1.0


def test_fresh_legacy_lock_is_contention_and_has_no_owner_to_look_up(
    kube_api: KubeAPIServer, locker: Locker
) -> None:
    legacy = format_rfc3339(NOW - timedelta(minutes=1))
    kube_api.store.put(_node("n1", legacy))
    kube_api.requests.clear()
    with pytest.raises(NodeLockError) as err:
        locker.locker.lock_node("n1", "default", "p1")
    assert str(err.value) == "node n1 has been locked within 5m0s: node lock contention"
    assert err.value.contention
    assert kube_api.requests.count(path=r"/pods/") == 0  # no owner: no dangling-owner GET
    assert _lock_value(kube_api, "n1") == legacy


def test_release_deletes_a_legacy_lock_without_owner_check(kube_api: KubeAPIServer, locker: Locker) -> None:
    kube_api.store.put(_node("n1", format_rfc3339(NOW)))
    locker.locker.release_node_lock("n1", "default", "p1")
    assert _lock_value(kube_api, "n1") is None


def test_release_leaves_a_lock_owned_by_another_pod(kube_api: KubeAPIServer, locker: Locker) -> None:
    theirs = format_node_lock(NodeLock(NOW, "default", "other"))
    kube_api.store.put(_node("n1", theirs))
    kube_api.requests.clear()
    locker.locker.release_node_lock("n1", "default", "p1")
    assert _lock_value(kube_api, "n1") == theirs
    assert kube_api.requests.count(method="PATCH") == 0
    # The owner itself releases it.
    locker.locker.release_node_lock("n1", "default", "other")
    assert _lock_value(kube_api, "n1") is None


def test_release_does_not_delete_a_lock_replaced_meanwhile(kube_api: KubeAPIServer, locker: Locker) -> None:
    """skip_owner_check deletes only the value read at start: a new holder's lock survives."""
    kube_api.store.put(_node("n1", format_node_lock(NodeLock(NOW, "default", "old"))))
    newer = format_node_lock(NodeLock(NOW, "default", "new"))
    # The first PATCH fails (500) and in between another scheduler takes the lock.
    kube_api.faults.add(method="PATCH", path=r"/nodes/n1$", status=500, times=1)
    original = locker.locker.sleep

    def swap(seconds: float) -> None:
        original(seconds)
        kube_api.store.put(_node("n1", newer))

    locker.locker.sleep = swap
    locker.locker.release_node_lock("n1", "default", "me", skip_owner_check=True)
    assert _lock_value(kube_api, "n1") == newer


def test_lock_is_reentrant_for_the_same_pod(kube_api: KubeAPIServer, locker: Locker) -> None:
    ours = format_node_lock(NodeLock(NOW - timedelta(minutes=1), "default", "p1"))
    kube_api.store.put(_node("n1", ours))
    kube_api.requests.clear()
    locker.locker.lock_node("n1", "default", "p1")
    assert _lock_value(kube_api, "n1") == ours  # kept as is, not re-stamped
    assert kube_api.requests.count(method="PATCH") == 0


def test_fresh_lock_of_a_live_pod_is_contention(kube_api: KubeAPIServer, locker: Locker) -> None:
    theirs = format_node_lock(NodeLock(NOW, "default", "other"))
    kube_api.store.put(_node("n1", theirs))
    kube_api.store.put(pod(name="other"))
    with pytest.raises(NodeLockError) as err:
        locker.locker.lock_node("n1", "default", "p1")
    assert err.value.contention
    assert _lock_value(kube_api, "n1") == theirs


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            "2026-08-21T06:20:39Z,default",
            "malformed lock annotation: expected 3 parts, got 2 from 2026-08-21T06:20:39Z,default",
        ),
        ("a,b,c,d", "malformed lock annotation: expected 3 parts, got 4 from a,b,c,d"),
    ],
)
def test_malformed_lock_value_is_an_error_not_contention(
    kube_api: KubeAPIServer, locker: Locker, value: str, expected: str
) -> None:
    kube_api.store.put(_node("n1", value))
    with pytest.raises(NodeLockError) as err:
        locker.locker.lock_node("n1", "default", "p1")
    assert str(err.value) == expected
    assert not err.value.contention
    assert _lock_value(kube_api, "n1") == value  # nothing is overwritten


def test_unparsable_lock_time_names_rfc3339(kube_api: KubeAPIServer, locker: Locker) -> None:
    kube_api.store.put(_node("n1", "yesterday,default,p0"))
    with pytest.raises(NodeLockError) as err:
        locker.locker.lock_node("n1", "default", "p1")
    assert "RFC3339" in str(err.value) and "yesterday" in str(err.value)
    assert not err.value.contention


def test_lock_from_a_fresh_cached_node_costs_one_patch(kube_api: KubeAPIServer, locker: Locker) -> None:
    cached = kube_api.store.put(_node("n1"))
    kube_api.requests.clear()
    locker.locker.lock_node("n1", "default", "p1", cached=cached)
    assert _lock_value(kube_api, "n1") == format_node_lock(NodeLock(NOW, "default", "p1"))
    assert kube_api.requests.count(method="GET") == 0
    assert kube_api.requests.count(method="PATCH", path=r"/nodes/n1$") == 1


def test_stale_cached_node_falls_back_to_reading_it(kube_api: KubeAPIServer, locker: Locker) -> None:
    stale = kube_api.store.put(_node("n1"))
    theirs = format_node_lock(NodeLock(NOW, "default", "other"))
    kube_api.store.put(_node("n1", theirs))  # locked since the cache saw it
    kube_api.store.put(pod(name="other"))
    kube_api.requests.clear()
    with pytest.raises(NodeLockError) as err:
        locker.locker.lock_node("n1", "default", "p1", cached=stale)
    assert err.value.contention
    assert _lock_value(kube_api, "n1") == theirs  # the precondition protected it
    assert kube_api.requests.count(method="GET", path=r"/nodes/n1$") == 1
    # Changed but unlocked (e.g. the holder released it): the fallback takes the lock.
    kube_api.store.put(_node("n1"))
    locker.locker.lock_node("n1", "default", "p1", cached=stale)
    assert _lock_value(kube_api, "n1") == format_node_lock(NodeLock(NOW, "default", "p1"))


@pytest.mark.parametrize(("env", "want"), [("", 300.0), ("90s", 90.0), ("1h30m", 5400.0),
                                           ("300", 300.0), ("-1m", 300.0), ("soon", 300.0)])
def test_expiry_from_the_environment_is_a_go_duration(env: str, want: float,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """HAMI_NODELOCK_EXPIRE takes Go's syntax; anything else (a bare number, a negative) keeps 5m."""
    monkeypatch.setenv("HAMI_NODELOCK_EXPIRE", env)
    assert default_timeout().total_seconds() == want
    assert build_parser().parse_args([]).node_lock_timeout.total_seconds() == want


@pytest.mark.parametrize(("value", "why"), [("300", "want a Go duration such as 300ms"),
                                            ("-5m", "must not be negative")])
def test_bad_lock_flags_are_usage_errors(value: str, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--node-lock-timeout", "--node-lock-retry-timeout"):
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args([f"{flag}={value}"])
        assert exc.value.code == 2
        assert f"argument {flag}: invalid duration {value!r}: {why}" in capsys.readouterr().err
    args = build_parser().parse_args(["--node-lock-timeout", "2m30s"])
    assert args.node_lock_timeout == timedelta(seconds=150)
