"""Node protocol checks: the handshake and node lock annotations the scheduler and device plugin share."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from hami.core import annotations as ann
from hami.core.codec import CodecError
from hami.core.codec.handshake import REQUESTING, check_handshake, parse_datetime
from hami.core.codec.nodelock import NodeLock, is_expired, parse_node_lock
from hami.core.codec.quantity import parse_quantity
from hami.core.duration import format_duration
from hami.core.objects import annotations_of, name_of
from hami.doctor.findings import BROKEN, INFO, OK, WARNING, Finding, Remedy
from hami.doctor.settings import Settings

Obj = dict[str, Any]

HANDSHAKE_FORMAT = (
    "written by the scheduler as HAMi v2.10 does (Requesting_<its local time>), not a Unix timestamp "
    "from the device plugin: compare it with the time, not with date +%s"
)
# Clocks further apart than this break the handshake (docs/guides/device-plugin-debugging.md §4.3).
CLOCK_SKEW = timedelta(seconds=30)
FIX_VERSIONS = "device plugin and scheduler versions differ: upgrade HAMi components together"


def age(when: datetime, now: datetime) -> str:
    """How long ago ``when`` was, to the second (annotation and event times carry no more)."""
    return format_duration(timedelta(seconds=int((now - when).total_seconds())))


def allocatable_gpus(node: Obj, resource: str = ann.RESOURCE_GPU) -> int:
    """``status.allocatable[nvidia.com/gpu]`` as an integer; 0 when absent or malformed."""
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    if value is None:
        return 0
    try:
        return int(parse_quantity(str(value)))
    except CodecError:
        return 0


def check_node_handshake(node: Obj, s: Settings, now: datetime) -> list[Finding]:
    name = name_of(node)
    value = annotations_of(node).get(ann.NODE_HANDSHAKE)
    gpus = allocatable_gpus(node)
    if value is None:
        return [
            Finding(
                WARNING,
                "node.handshake.missing",
                f"no handshake record ({ann.NODE_HANDSHAKE} is absent)",
                (f"{ann.NODE_HANDSHAKE}: <absent>",),
                "the scheduler writes Requesting_<now> within 15 s on nodes it registers: check that "
                "it runs, is leader, and that --node-label-selector includes the node",
            )
        ]
    evidence = [f"{ann.NODE_HANDSHAKE}: {value}", f"allocatable {ann.RESOURCE_GPU}: {gpus}"]
    clear = Remedy(
        name,
        ann.NODE_HANDSHAKE,
        value,
        f"remove {ann.NODE_HANDSHAKE} from {name}; the scheduler writes a fresh request at its next tick",
    )
    if REQUESTING not in value:
        return [
            Finding(
                WARNING,
                "node.handshake.legacy",
                "handshake is not a scheduler request "
                "(legacy device plugin value); the v2.10 scheduler replaces it at its next tick",
                tuple(evidence),
                FIX_VERSIONS,
            )
        ]
    _, sep, stamp = value.partition("_")
    try:
        if not sep:
            raise CodecError("handshake has no '_' separator", "handshake", value)
        when = parse_datetime(stamp, "handshake timestamp", s.scheduler_tz)
    except CodecError as exc:
        return [
            Finding(
                WARNING,
                "node.handshake.undecodable",
                "handshake cannot be parsed: the scheduler treats the node as healthy and never "
                "refreshes the handshake",
                (*evidence, f"error: {exc}"),
                "remove the annotation (--fix) so the scheduler writes a fresh one",
                clear,
            )
        ]
    evidence.append(f"age {age(when, now)}, threshold {format_duration(s.handshake_timeout)}")
    if now - when < -CLOCK_SKEW:
        return [
            Finding(
                WARNING,
                "node.handshake.future",
                "handshake time is in the future: clocks differ",
                tuple(evidence),
                "check NTP on the nodes and the control plane; keep skew under 30 s",
            )
        ]
    healthy, _ = check_handshake(value, now, gpus, s.scheduler_tz)
    # The guides' check subtracts the value from `date +%s`: say once why that cannot work here.
    evidence.append(HANDSHAKE_FORMAT)
    if now - when < s.handshake_timeout:
        return [
            Finding(OK, "node.handshake.ok", f"handshake requested {age(when, now)} ago", tuple(evidence))
        ]
    if healthy:
        return [
            Finding(
                OK,
                "node.handshake.ok",
                f"handshake requested {age(when, now)} ago; older than "
                f"{format_duration(s.handshake_timeout)}, but {gpus} allocatable {ann.RESOURCE_GPU} "
                "keeps the node healthy (v2.10 device plugins do not answer the handshake)",
                tuple(evidence),
            )
        ]
    return [
        Finding(
            BROKEN,
            "node.handshake.expired",
            f"handshake expired ({age(when, now)} > {format_duration(s.handshake_timeout)}) and kubelet "
            f"reports no allocatable {ann.RESOURCE_GPU}: the scheduler drops the node's devices",
            tuple(evidence),
            "check the device plugin pod (CrashLoopBackOff → its logs), its kubelet registration "
            "('Registered device plugin ... with Kubelet') and NTP (skew under 30 s)",
            clear,
        )
    ]


def check_node_lock(
    node: Obj, owner_exists: bool | None, s: Settings, now: datetime
) -> tuple[list[Finding], NodeLock | None]:
    """Lock state and age; ``owner_exists`` is whether the owner pod was found (None: not looked up)."""
    name = name_of(node)
    value = annotations_of(node).get(ann.NODE_LOCK)
    if value is None:
        return [Finding(OK, "node.lock.free", "node lock free")], None
    clear = Remedy(
        name,
        ann.NODE_LOCK,
        value,
        f"remove {ann.NODE_LOCK} from {name} (kubectl annotate node {name} {ann.NODE_LOCK}-)",
    )
    evidence = [f"{ann.NODE_LOCK}: {value}"]
    try:
        lock = parse_node_lock(value)
    except CodecError as exc:
        return [
            Finding(
                BROKEN,
                "node.lock.malformed",
                "node lock cannot be parsed: every bind to this node fails until it is removed",
                (*evidence, f"error: {exc}"),
                "clear the node lock (--fix, or kubectl annotate node NAME hami.io/mutex.lock-)",
                clear,
            )
        ], None
    owner = f"{lock.namespace}/{lock.name}" if lock.name else "<legacy lock, no owner>"
    evidence.append(
        f"owner {owner}, age {age(lock.time, now)}, timeout {format_duration(s.node_lock_timeout)}"
    )
    # One semantics with the scheduler and HAMiNodeLockHeldTooLong: a lock matters while it holds
    # the node, i.e. while a bind of another pod would fail on it (the scheduler's
    # hami_scheduler_node_schedulable reason node_lock, which the alert reads). An expired lock, or
    # one whose owner is gone, holds nothing: the next bind takes it over, and the scheduler counts
    # the takeover (HAMiNodeLockExpired, severity info). Left in place it costs no pod anything, so
    # it is info here too (exit 0), not a warning the alert would never confirm; that a bind
    # crashed is worth knowing, so it is still shown, with --fix to clear it.
    if is_expired(lock, now, s.node_lock_timeout):
        return [
            Finding(
                INFO,
                "node.lock.expired",
                f"node lock held by {owner} for {age(lock.time, now)}: expired "
                f"(> {format_duration(s.node_lock_timeout)}), so it no longer holds the node; the next "
                "bind takes it over. Whoever set it did not release it",
                tuple(evidence),
                "if it recurs, check the device plugin's Allocate on this node; or clear the lock now",
                clear,
            )
        ], lock
    if lock.name and owner_exists is False:
        return [
            Finding(
                INFO,
                "node.lock.dangling",
                f"node lock held by {owner}, which no longer exists, so it no longer holds the node; "
                "the next bind takes it over",
                tuple(evidence),
                "nothing to do; or clear it now",
                clear,
            )
        ], lock
    if now - lock.time > s.lock_held_alert:
        expires = format_duration(lock.time + s.node_lock_timeout - now)
        return [
            Finding(
                WARNING,
                "node.lock.stuck",
                f"node lock held by {owner} for {age(lock.time, now)} (> "
                f"{format_duration(s.lock_held_alert)}, HAMiNodeLockHeldTooLong): binds of other pods "
                f"to this node fail until it is released or expires in {expires}",
                tuple(evidence),
                "check the holder's allocation (hami-doctor pod " + owner + ") and the device plugin on "
                "this node; or clear the lock now",
                clear,
            )
        ], lock
    return [
        Finding(
            OK,
            "node.lock.held",
            f"node lock held by {owner} for {age(lock.time, now)} (allocation in progress)",
            tuple(evidence),
        )
    ], lock
