"""``hami_scheduler_node_schedulable``: one reason per node, from what the extender enforces."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hami.core.codec.handshake import format_requesting
from hami.core.codec.nodelock import NodeLock, format_node_lock
from hami.core.devices import DeviceInfo
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.extender import schedulable as s
from hami.scheduler.extender.state import DECODE_ERROR, HANDSHAKE_EXPIRED, HEALTHY, UNREGISTERED, NodeRecord
from hami.testing.builders import gpu_node
from hami.testing.extender import metrics_text, running
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until
from hami.testing.zone import local_zone

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
TIMEOUT = timedelta(minutes=5)


def _dev(i: int, health: bool = True, kind: str = "NVIDIA-A100") -> DeviceInfo:
    return DeviceInfo(id=f"GPU-{i}", index=i, count=10, devmem=40960, devcore=100, type=kind, health=health)


def _record(*devs: DeviceInfo, cordoned: frozenset[str] = frozenset()) -> NodeRecord:
    return NodeRecord(HEALTHY, node=NodeState("n", devs, cordoned))


def _lock(age: timedelta, owner: str = "ns/p") -> str:
    namespace, name = owner.split("/")
    return format_node_lock(NodeLock(NOW - age, namespace, name))


def _exists(namespace: str, name: str) -> bool:
    return (namespace, name) == ("ns", "p")


@pytest.mark.parametrize(
    ("record", "annotations", "reason"),
    [
        (_record(_dev(0)), {}, s.SCHEDULABLE),
        (NodeRecord(HANDSHAKE_EXPIRED), {}, s.HANDSHAKE),
        (NodeRecord(DECODE_ERROR), {}, s.DECODE),
        (NodeRecord(UNREGISTERED), {}, s.NO_DEVICES),
        (None, {}, s.NO_DEVICES),
        (_record(_dev(0, kind="AMD-MI300")), {}, s.NO_DEVICES),
        (_record(_dev(0, health=False), _dev(1, health=False)), {}, s.UNHEALTHY),
        (_record(_dev(0), cordoned=frozenset({"GPU-0"})), {}, s.UNHEALTHY),
        (_record(_dev(0, health=False), _dev(1)), {}, s.SCHEDULABLE),
        # a live lock holds the node; an expired one, or one whose owner is gone, is taken over
        (_record(_dev(0)), {"hami.io/mutex.lock": _lock(timedelta(minutes=4))}, s.NODE_LOCK),
        (_record(_dev(0)), {"hami.io/mutex.lock": _lock(timedelta(minutes=6))}, s.SCHEDULABLE),
        (_record(_dev(0)), {"hami.io/mutex.lock": _lock(timedelta(minutes=1), "ns/gone")}, s.SCHEDULABLE),
        (_record(_dev(0)), {"hami.io/mutex.lock": "yesterday"}, s.NODE_LOCK),
        # the handshake outranks the lock: the scheduler never gets to bind there
        (NodeRecord(HANDSHAKE_EXPIRED), {"hami.io/mutex.lock": _lock(timedelta(minutes=1))}, s.HANDSHAKE),
    ],
)
def test_node_reason(record: NodeRecord | None, annotations: dict[str, str], reason: str) -> None:
    assert s.node_reason(record, annotations, NOW, TIMEOUT, _exists) == reason


def test_the_enforced_timeout_decides_expiry() -> None:
    held = {"hami.io/mutex.lock": _lock(timedelta(minutes=4))}
    assert s.node_reason(_record(_dev(0)), held, NOW, timedelta(minutes=3), _exists) == s.SCHEDULABLE


def _schedulable(text: str) -> dict[str, tuple[str, float]]:
    out: dict[str, tuple[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "hami_scheduler_node_schedulable":
            for sample in family.samples:
                out[sample.labels["node"]] = (sample.labels["reason"], sample.value)
    return out


def test_live_scrape_reports_each_node_once(kube_api: KubeAPIServer) -> None:
    # The handshake is the scheduler's local time with no zone: pinned to one without daylight saving.
    with local_zone("UTC"):
        _each_node_once(kube_api)


def _each_node_once(kube_api: KubeAPIServer) -> None:
    now = datetime.now(UTC)
    lock = format_node_lock(NodeLock(now.replace(microsecond=0), "default", "holder"))
    kube_api.store.put(gpu_node("good"))
    kube_api.store.put(gpu_node("locked", annotations={"hami.io/mutex.lock": lock}))
    kube_api.store.put(gpu_node("broken", annotations={"hami.io/node-nvidia-register": "[{"}))
    stale = format_requesting(now - timedelta(minutes=20))
    kube_api.store.put(gpu_node("stale", annotations={"hami.io/node-handshake": stale}, allocatable=0))
    kube_api.store.put(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder", "namespace": "default"}}
    )
    with running(kube_api) as ext:
        def four() -> dict[str, tuple[str, float]] | None:
            found = _schedulable(metrics_text(ext))
            return found if len(found) == 4 else None

        got = wait_until(four, what="every node in hami_scheduler_node_schedulable")
    assert got == {
        "good": ("ok", 1.0),
        "locked": ("node_lock", 0.0),
        "broken": ("decode_error", 0.0),
        "stale": ("handshake_expired", 0.0),
    }
