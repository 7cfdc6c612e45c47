"""Will the scheduler place GPU pods on this node now, and if not, why (``hami_scheduler_node_schedulable``).

One answer per node, from what the extender itself enforces: the register pass's state (handshake,
decode), the registered devices, and the node lock as ``LockNode`` treats it. A lock older than the
extender's ``--node-lock-timeout``, or whose owner pod is gone, does not hold the node: the next bind
takes it over. Alerts, dashboards and ``hami-doctor`` read this instead of judging the annotations
again with other numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Final

from hami.core import annotations as ann
from hami.core.codec.errors import CodecError
from hami.core.codec.nodelock import is_expired, parse_node_lock
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.extender.state import DECODE_ERROR, HANDSHAKE_EXPIRED, UNREGISTERED, NodeRecord

SCHEDULABLE: Final = "ok"
HANDSHAKE: Final = "handshake_expired"
NODE_LOCK: Final = "node_lock"
DECODE: Final = "decode_error"
NO_DEVICES: Final = "no_devices"
UNHEALTHY: Final = "unhealthy"
REASONS: Final = (SCHEDULABLE, HANDSHAKE, NODE_LOCK, DECODE, NO_DEVICES, UNHEALTHY)

_BY_STATE: Final = {HANDSHAKE_EXPIRED: HANDSHAKE, DECODE_ERROR: DECODE, UNREGISTERED: NO_DEVICES}


def devices_reason(node: NodeState) -> str:
    """``no_devices`` without an NVIDIA card, ``unhealthy`` when none is healthy and uncordoned."""
    nvidia = [d for d in node.devices if "nvidia" in d.type.lower()]
    if not nvidia:
        return NO_DEVICES
    if not any(d.health and d.id not in node.cordoned for d in nvidia):
        return UNHEALTHY
    return SCHEDULABLE


def lock_holds(
    value: str | None, now: datetime, timeout: timedelta, pod_exists: Callable[[str, str], bool]
) -> bool:
    """Whether a bind of another pod to the node would fail with node lock contention now."""
    if value is None:
        return False
    try:
        lock = parse_node_lock(value)
    except CodecError:
        return True  # LockNode fails on it until someone removes it
    if is_expired(lock, now, timeout):
        return False
    return not (lock.name and not pod_exists(lock.namespace, lock.name))


def node_reason(
    record: NodeRecord | None,
    annotations: Mapping[str, str],
    now: datetime,
    timeout: timedelta,
    pod_exists: Callable[[str, str], bool],
    *,
    devices: Callable[[NodeState], str] = devices_reason,
) -> str:
    """The one reason for a node (``ok`` when the scheduler places GPU pods on it); ``devices``:
    ``devices_reason``, or a caller's memo of it."""
    if record is None:
        return NO_DEVICES
    if record.state in _BY_STATE:
        return _BY_STATE[record.state]
    if record.node is not None and (why := devices(record.node)) != SCHEDULABLE:
        return why
    if lock_holds(annotations.get(ann.NODE_LOCK), now, timeout, pod_exists):
        return NODE_LOCK
    return SCHEDULABLE
