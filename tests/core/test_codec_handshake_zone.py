"""Handshake times across daylight-saving changes (§1.3): HAMi writes and reads them in local time with
no zone (Go's ``time.Now().Format(time.DateTime)``, ``time.ParseInLocation(..., time.Local)``), so both
sides must use the offset in force at each instant. The repeated hour is ambiguous in the text itself;
there we read what Go reads (the expected instants below are Go 1.26's answers).

Section signs (§) refer to docs/design/scheduler-annotations.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from hami.core.codec.handshake import format_datetime, parse_datetime
from hami.testing.zone import local_zone

# A daylight-saving change of each zone in 2026, as its UTC instant.
TRANSITIONS = [
    ("Europe/Berlin", datetime(2026, 3, 29, 1, 0, tzinfo=UTC)),
    ("Europe/Berlin", datetime(2026, 10, 25, 1, 0, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 3, 8, 7, 0, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 11, 1, 6, 0, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2026, 4, 4, 15, 0, tzinfo=UTC)),  # a 30-minute change
]
# (zone, wall time in a skipped or repeated hour, the instant Go's ParseInLocation gives).
GO_READS = [
    ("Europe/Berlin", "2026-10-25 02:30:00", datetime(2026, 10, 25, 1, 30, tzinfo=UTC)),
    ("Europe/Berlin", "2026-03-29 02:30:00", datetime(2026, 3, 29, 1, 30, tzinfo=UTC)),
    ("America/New_York", "2026-11-01 01:30:00", datetime(2026, 11, 1, 5, 30, tzinfo=UTC)),
    ("America/New_York", "2026-03-08 02:30:00", datetime(2026, 3, 8, 6, 30, tzinfo=UTC)),
    ("Australia/Lord_Howe", "2026-04-05 01:45:00", datetime(2026, 4, 4, 15, 15, tzinfo=UTC)),
]
# The same zone in summer and in winter, so a formatter that uses one offset for all fails either way.
SEASONS = [datetime(2026, 1, 15, 12, 0, tzinfo=UTC), datetime(2026, 7, 15, 12, 0, tzinfo=UTC)]


def _around(at: datetime) -> list[datetime]:
    """Every 5 minutes from 3 hours before ``at`` to 3 hours after, with the seasons."""
    return [at + timedelta(minutes=m) for m in range(-180, 181, 5)] + SEASONS


def _round_trips(
    instants: list[datetime], write: Callable[[datetime], str], read: Callable[[str], datetime]
) -> None:
    texts = [write(t) for t in instants]
    repeated = {text for text, n in Counter(texts).items() if n > 1}  # the repeated hour's walls
    assert len(repeated) < len(texts) // 2
    for t, text in zip(instants, texts, strict=True):
        if text not in repeated:
            assert read(text) == t, (t, text)
        else:
            assert read(text) in {u for u, x in zip(instants, texts, strict=True) if x == text}


@pytest.mark.parametrize(("zone", "at"), TRANSITIONS)
def test_round_trip_in_a_named_zone_across_its_changes(zone: str, at: datetime) -> None:
    tz = ZoneInfo(zone)
    _round_trips(_around(at), lambda t: format_datetime(t, tz), lambda s: parse_datetime(s, tz=tz))


@pytest.mark.parametrize(("zone", "at"), TRANSITIONS)
def test_round_trip_in_the_process_local_zone_across_its_changes(zone: str, at: datetime) -> None:
    """The scheduler's path: no zone given, the process's own (its pod's TZ)."""
    with local_zone(zone):
        _round_trips(_around(at), format_datetime, parse_datetime)


@pytest.mark.parametrize(("zone", "text", "instant"), GO_READS)
def test_skipped_and_repeated_walls_read_as_go_reads_them(zone: str, text: str, instant: datetime) -> None:
    assert parse_datetime(text, tz=ZoneInfo(zone)) == instant
    with local_zone(zone):
        assert parse_datetime(text) == instant


def test_the_written_text_is_the_wall_clock_of_that_instant() -> None:
    with local_zone("Europe/Berlin"):
        assert [format_datetime(t) for t in SEASONS] == ["2026-01-15 13:00:00", "2026-07-15 14:00:00"]
        assert format_datetime(datetime(2026, 10, 25, 0, 59, 59, tzinfo=UTC)) == "2026-10-25 02:59:59"
        assert format_datetime(datetime(2026, 10, 25, 1, 0, 0, tzinfo=UTC)) == "2026-10-25 02:00:00"


def test_an_unknown_zone_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no such time zone"), local_zone("Mars/Olympus_Mons"):
        pass
