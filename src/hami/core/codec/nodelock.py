"""``hami.io/mutex.lock`` values (§1.5).

Current form ``<RFC3339>,<namespace>,<pod>`` (second precision, local offset, ``Z`` for UTC);
legacy form a bare RFC3339 timestamp with no owner.

Section signs (§) refer to docs/design/scheduler-annotations.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

from hami.core.codec.errors import CodecError
from hami.core.duration import format_duration

DEFAULT_TIMEOUT = timedelta(minutes=5)
CONTENTION = "node lock contention"

# Go time.Parse(time.RFC3339, ...): hour may have one digit, fraction allowed, "Z" or ±hh:mm.
_RFC3339_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{1,2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:(Z)|([+-])(\d{2}):(\d{2}))"
)


@dataclass(frozen=True)
class NodeLock:
    time: datetime  # timezone-aware
    namespace: str = ""  # empty for the legacy form
    name: str = ""


def parse_rfc3339(text: str, where: str = "lock time") -> datetime:
    m = _RFC3339_RE.fullmatch(text)
    if m is None:
        raise CodecError('time does not match RFC3339 "2006-01-02T15:04:05Z07:00"', where, text)
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    micro = int((m.group(7) or "0")[:6].ljust(6, "0"))
    if m.group(8):
        tz = UTC
    else:
        hh, mm = int(m.group(10)), int(m.group(11))
        if hh > 23 or mm > 59:
            raise CodecError("time zone offset out of range", where, text)
        sign = 1 if m.group(9) == "+" else -1
        tz = timezone(sign * timedelta(hours=hh, minutes=mm))
    try:
        return datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)
    except ValueError as exc:
        raise CodecError(f"time out of range: {exc}", where, text) from None


def format_rfc3339(when: datetime) -> str:
    """Go ``Format(time.RFC3339)``: seconds precision, ``Z`` when the offset is zero."""
    if when.tzinfo is None:
        when = when.astimezone()
    offset = when.utcoffset() or timedelta(0)
    base = when.strftime("%Y-%m-%dT%H:%M:%S")
    if offset == timedelta(0):
        return base + "Z"
    seconds = int(offset.total_seconds())
    sign = "+" if seconds >= 0 else "-"
    minutes = abs(seconds) // 60  # Go truncates a seconds part of the offset toward zero
    return f"{base}{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def parse_node_lock(value: str) -> NodeLock:
    """Go ``ParseNodeLock``: no ``,`` → legacy bare time; otherwise exactly three parts."""
    if not isinstance(value, str):
        raise CodecError("node lock must be a string", "hami.io/mutex.lock", type(value).__name__)
    if "," not in value:
        return NodeLock(parse_rfc3339(value))
    parts = value.split(",")
    if len(parts) != 3:
        msg = f"malformed lock annotation: expected 3 parts, got {len(parts)} from {value}"
        raise CodecError(msg, "hami.io/mutex.lock", value, message=msg)
    return NodeLock(parse_rfc3339(parts[0], "hami.io/mutex.lock part 0"), parts[1], parts[2])


def format_node_lock(lock: NodeLock) -> str:
    """``2026-08-21T06:20:39Z,default,gpu-pod-1`` (or the bare time when there is no owner)."""
    if not lock.namespace and not lock.name:
        return format_rfc3339(lock.time)
    for field, text in (("namespace", lock.namespace), ("name", lock.name)):
        if "," in text or not text:
            raise CodecError("lock owner part must be non-empty and contain no ','", field, text)
    return f"{format_rfc3339(lock.time)},{lock.namespace},{lock.name}"


def is_expired(lock: NodeLock, now: datetime, timeout: timedelta = DEFAULT_TIMEOUT) -> bool:
    """HAMi's ``now - lockTime > NodeLockTimeout``."""
    if now.tzinfo is None:
        now = now.astimezone()
    return now - lock.time > timeout


def is_owned_by(value: str, namespace: str, name: str) -> bool:
    """New-format value ending with ``,<ns>,<name>`` (how HAMi recognises its own lock)."""
    return "," in value and value.endswith(f",{namespace},{name}")


def locked_within_message(node: str, timeout: timedelta) -> str:
    return f"node {node} has been locked within {format_duration(timeout)}: {CONTENTION}"


def is_locked_message(node: str) -> str:
    return f"node {node} is locked: {CONTENTION}"
