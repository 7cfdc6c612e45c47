"""Handshake (§1.3) and node-lock (§1.5) values.

Section signs (§) refer to docs/design/scheduler-annotations.md.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.core.codec.errors import CodecError
from hami.core.codec.handshake import (
    DELETED,
    REPORTED,
    REQUESTING,
    STATES,
    Handshake,
    check_handshake,
    format_handshake,
    format_requesting,
    parse_handshake,
)
from hami.core.codec.nodelock import (
    NodeLock,
    format_node_lock,
    is_expired,
    is_locked_message,
    is_owned_by,
    locked_within_message,
    parse_node_lock,
)
from hami.core.duration import format_duration

CEST = timezone(timedelta(hours=2))
T0 = datetime(2025, 6, 13, 9, 7, 40, tzinfo=CEST)


def test_requesting_literal() -> None:
    assert format_requesting(T0, tz=CEST) == "Requesting_2025-06-13 09:07:40"
    # The same instant rendered in another local zone.
    assert format_requesting(T0, tz=UTC) == "Requesting_2025-06-13 07:07:40"
    assert parse_handshake("Requesting_2025-06-13 09:07:40", tz=CEST) == Handshake(REQUESTING, T0)


def test_reported_and_deleted_forms() -> None:
    assert parse_handshake("Reported_2025-06-13 09:07:40", tz=CEST).state == REPORTED
    assert parse_handshake("Deleted_2025-06-13 09:07:40", tz=CEST).state == DELETED
    legacy = parse_handshake("Reported 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895")
    assert legacy == Handshake(REPORTED, datetime(2024, 1, 23, 4, 30, 4, 434037, tzinfo=UTC))


def test_go_datetime_leniency() -> None:
    # Go accepts a one-digit hour and a fractional second the layout does not mention.
    assert parse_handshake("Requesting_2025-06-13 9:07:40.5", tz=UTC).time == datetime(
        2025, 6, 13, 9, 7, 40, 500000, tzinfo=UTC
    )


@pytest.mark.parametrize(
    "value",
    [
        "Requesting",
        "Unknown_2025-06-13 09:07:40",
        "Requesting_2025-13-13 09:07:40",
        "Requesting_2025-06-13T09:07:40",
        "Requesting_2025-06-13 09:07:40 ",
        "Reported 2024-01-23",
        "Requesting_2025-02-30 00:00:00",
    ],
)
def test_handshake_errors(value: str) -> None:
    with pytest.raises(CodecError, match="handshake"):
        parse_handshake(value, tz=UTC)


@pytest.mark.parametrize(
    ("value", "now_offset_s", "allocatable", "expected"),
    [
        ("Requesting_2025-06-13 09:07:40", 30, 0, (True, False)),  # pending, not yet expired
        ("Requesting_2025-06-13 09:07:40", -3600, 0, (True, False)),  # timestamp in the future
        ("Requesting", 3600, 0, (True, False)),  # no '_'
        ("Requesting_garbage", 3600, 0, (True, False)),  # unparsable
        ("Requesting_2025-06-13 09:07:40", 60, 0, (False, False)),  # expired, no GPUs
        ("Requesting_2025-06-13 09:07:40", 61, 0, (False, False)),
        ("Requesting_2025-06-13 09:07:40", 61, 4, (True, False)),  # expired, GPUs allocatable
        ("Unknown", 0, 0, (True, True)),
        ("Reported_2025-06-13 09:07:40", 0, 0, (True, True)),
        ("Deleted_2025-06-13 09:07:40", 0, 0, (True, True)),
        (None, 0, 0, (True, True)),
    ],
)
def test_check_handshake_matrix(
    value: str | None, now_offset_s: int, allocatable: int, expected: tuple[bool, bool]
) -> None:
    now = T0 + timedelta(seconds=now_offset_s)
    assert check_handshake(value, now, allocatable, tz=CEST) == expected


_times = st.datetimes(datetime(1970, 1, 2), datetime(9999, 12, 30)).map(lambda d: d.replace(microsecond=0))
_zones = st.sampled_from([UTC, CEST, timezone(timedelta(hours=-9, minutes=-30))])


@given(st.sampled_from(STATES), _times, _zones)
def test_handshake_round_trip(state: str, naive: datetime, tz: timezone) -> None:
    h = Handshake(state, naive.replace(tzinfo=tz))
    assert parse_handshake(format_handshake(h, tz), tz) == h


# ---- node lock ----


def test_lock_literal() -> None:
    value = "2026-08-21T06:20:39Z,default,gpu-pod-1"
    lock = parse_node_lock(value)
    assert lock == NodeLock(datetime(2026, 8, 21, 6, 20, 39, tzinfo=UTC), "default", "gpu-pod-1")
    assert format_node_lock(lock) == value
    assert format_node_lock(NodeLock(datetime(2026, 8, 21, 8, 20, 39, tzinfo=CEST), "ns", "p")) == (
        "2026-08-21T08:20:39+02:00,ns,p"
    )


def test_legacy_lock_is_bare_time() -> None:
    lock = parse_node_lock("2026-08-21T08:20:39.123+02:00")
    assert (lock.namespace, lock.name) == ("", "")
    assert lock.time == datetime(2026, 8, 21, 6, 20, 39, 123000, tzinfo=UTC)
    assert format_node_lock(NodeLock(datetime(2026, 8, 21, 6, 20, 39, tzinfo=UTC))) == "2026-08-21T06:20:39Z"


def test_lock_errors() -> None:
    with pytest.raises(CodecError) as info:
        parse_node_lock("2026-08-21T06:20:39Z,default")
    assert str(info.value) == (
        "malformed lock annotation: expected 3 parts, got 2 from 2026-08-21T06:20:39Z,default"
    )
    with pytest.raises(CodecError, match="got 4"):
        parse_node_lock("a,b,c,d")
    for bad in (
        "yesterday",
        "2026-08-21 06:20:39Z,a,b",
        "2026-08-21T06:20:39,a,b",
        "2026-08-21T06:20:39+24:00",
    ):
        with pytest.raises(CodecError, match=r"RFC3339|offset"):
            parse_node_lock(bad)


def test_expiry_and_ownership() -> None:
    lock = parse_node_lock("2026-08-21T06:20:39Z,default,p")
    t = lock.time
    assert not is_expired(lock, t + timedelta(minutes=5))
    assert is_expired(lock, t + timedelta(minutes=5, seconds=1))
    assert is_expired(lock, t + timedelta(minutes=2, seconds=1), timedelta(minutes=2))
    assert is_owned_by("2026-08-21T06:20:39Z,default,p", "default", "p")
    assert not is_owned_by("2026-08-21T06:20:39Z,default,q", "default", "p")
    assert not is_owned_by("2026-08-21T06:20:39Z", "", "")


def test_contention_messages() -> None:
    assert locked_within_message("n1", timedelta(minutes=5)) == (
        "node n1 has been locked within 5m0s: node lock contention"
    )
    assert locked_within_message("n1", timedelta(minutes=2)).endswith("within 2m0s: node lock contention")
    assert is_locked_message("n1") == "node n1 is locked: node lock contention"
    assert [format_duration(timedelta(seconds=s)) for s in (0, 30, 90, 3600, 3661)] == [
        "0s",
        "30s",
        "1m30s",
        "1h0m0s",
        "1h1m1s",
    ]


_owner = st.text(st.characters(exclude_characters=",", exclude_categories=("Cs",)), min_size=1, max_size=10)


@given(_times, _zones, st.one_of(st.none(), st.tuples(_owner, _owner)))
def test_lock_round_trip(naive: datetime, tz: timezone, owner: tuple[str, str] | None) -> None:
    ns, name = owner or ("", "")
    lock = NodeLock(naive.replace(tzinfo=tz), ns, name)
    assert parse_node_lock(format_node_lock(lock)) == lock


def test_offsets_with_seconds_truncate_like_go() -> None:
    lmt = timezone(-timedelta(minutes=53, seconds=28))
    assert (
        format_node_lock(NodeLock(datetime(1900, 1, 1, tzinfo=lmt), "a", "b"))
        == "1900-01-01T00:00:00-00:53,a,b"
    )
