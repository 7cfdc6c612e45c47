"""``hami.io/node-handshake`` values (§1.3, docs/design/node-agent-device-plugin.md §C.5).

``Requesting_<ts>`` (scheduler), ``Reported_<ts>`` and ``Deleted_<ts>`` (older releases), where
``<ts>`` is local time as Go ``time.DateTime`` (``2006-01-02 15:04:05``), with no zone: written and
read with the offset in force at that instant (``time.Local``), so a daylight-saving change moves
nothing; only the repeated hour is ambiguous, read as Go's ``ParseInLocation`` reads it. The ≤ v2.7
device plugin wrote ``Reported <Go time.String()>``; ``parse_handshake`` reads that too.

Section signs (§) refer to docs/design/scheduler-annotations.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo

from hami.core.codec.errors import CodecError

REQUESTING = "Requesting"
REPORTED = "Reported"
DELETED = "Deleted"
STATES = (REQUESTING, REPORTED, DELETED)
HANDSHAKE_TIMEOUT = timedelta(seconds=60)

# Go's parser for "2006-01-02 15:04:05": the hour may have one digit, a fraction may follow seconds.
_DATETIME_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{1,2}):(\d{2}):(\d{2})(?:[.,](\d+))?")
# Go time.String(): "2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895".
_GO_STRING_RE = re.compile(
    r"(\d{4}-\d{2}-\d{2} \d{1,2}:\d{2}:\d{2}(?:\.\d+)?) ([+-])(\d{2})(\d{2})(?: \S+)?(?: m=[+-]\d+\.\d+)?"
)


@dataclass(frozen=True)
class Handshake:
    state: str  # one of STATES
    time: datetime  # timezone-aware


def _in_zone(instant: datetime, tz: tzinfo | None) -> datetime:
    """``instant`` in ``tz`` (None = the process's local zone), with the offset in force at that instant."""
    return instant.astimezone(tz) if tz is not None else instant.astimezone()


def _offset_at(instant: datetime, tz: tzinfo | None) -> timedelta:
    offset = _in_zone(instant, tz).utcoffset()
    assert offset is not None  # astimezone always gives an aware datetime
    return offset


def _go_date(naive: datetime, tz: tzinfo | None) -> datetime:
    """Go's ``time.Date`` in a location: the offset in force at the wall time read as UTC, looked up
    again at the result when that falls outside it. In a repeated hour this picks what Go picks (the
    later pass east of UTC, the earlier west of it), in a skipped one the same instant as Go. The
    result has that fixed offset: a ``ZoneInfo`` time in the repeated hour compares unequal to every
    other zone's (PEP 495) and loses its fold in arithmetic."""
    as_utc = naive.replace(tzinfo=UTC)
    offset = _offset_at(as_utc, tz)
    guess = as_utc - offset
    if _offset_at(guess, tz) != offset:
        offset = _offset_at(guess, tz)
    return (as_utc - offset).astimezone(timezone(offset))


def parse_datetime(text: str, where: str = "handshake", tz: tzinfo | None = None) -> datetime:
    """Go ``time.ParseInLocation(time.DateTime, text, loc)``; ``tz=None`` = the process's local zone."""
    m = _DATETIME_RE.fullmatch(text)
    if m is None:
        raise CodecError('timestamp does not match "2006-01-02 15:04:05"', where, text)
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    micro = int((m.group(7) or "0")[:6].ljust(6, "0"))
    try:
        return _go_date(datetime(year, month, day, hour, minute, second, micro), tz)
    except (ValueError, OverflowError) as exc:
        raise CodecError(f"timestamp out of range: {exc}", where, text) from None


def format_datetime(when: datetime, tz: tzinfo | None = None) -> str:
    """``2006-01-02 15:04:05`` in ``tz`` (None = local) with the offset in force at ``when``, as Go's
    ``Format`` does; a naive ``when`` is taken as local time."""
    if when.tzinfo is None:
        when = when.astimezone()
    return _in_zone(when, tz).strftime("%Y-%m-%d %H:%M:%S")


def format_handshake(h: Handshake, tz: tzinfo | None = None) -> str:
    if h.state not in STATES:
        raise CodecError(f"unknown handshake state, want one of {', '.join(STATES)}", "state", h.state)
    return f"{h.state}_{format_datetime(h.time, tz)}"


def format_requesting(now: datetime, tz: tzinfo | None = None) -> str:
    """The value the scheduler writes: ``Requesting_2025-06-13 09:07:40`` (local time)."""
    return f"{REQUESTING}_{format_datetime(now, tz)}"


def parse_handshake(value: str, tz: tzinfo | None = None) -> Handshake:
    """``<State>_<DateTime>`` or the legacy ``Reported <Go time.String()>``."""
    if not isinstance(value, str):
        raise CodecError("handshake must be a string", "handshake", type(value).__name__)
    if value.startswith(REPORTED + " "):
        m = _GO_STRING_RE.fullmatch(value, len(REPORTED) + 1)
        if m is None:
            raise CodecError("legacy Reported timestamp is not a Go time.String()", "handshake", value)
        sign = 1 if m.group(2) == "+" else -1
        offset = timezone(sign * timedelta(hours=int(m.group(3)), minutes=int(m.group(4))))
        return Handshake(REPORTED, parse_datetime(m.group(1), "handshake", offset))
    state, sep, ts = value.partition("_")
    if not sep:
        raise CodecError("handshake has no '_' separator", "handshake", value)
    if state not in STATES:
        raise CodecError(f"unknown handshake state, want one of {', '.join(STATES)}", "handshake", value)
    return Handshake(state, parse_datetime(ts, "handshake timestamp", tz))


def check_handshake(
    value: str | None, now: datetime, allocatable_gpus: int, tz: tzinfo | None = None
) -> tuple[bool, bool]:
    """HAMi's generic ``CheckHealth`` decision, without its side effect: ``(healthy, need_update)``.

    ``need_update`` True means the caller must write ``format_requesting(now)`` (HAMi does it here).
    """
    if value is None or REQUESTING not in value:
        return True, True
    _, sep, ts = value.partition("_")
    if not sep:
        return True, False
    try:
        when = parse_datetime(ts, "handshake timestamp", tz)
    except CodecError:
        return True, False
    if now.tzinfo is None:
        now = now.astimezone()
    if now < when + HANDSHAKE_TIMEOUT:
        return True, False
    return allocatable_gpus > 0, False
