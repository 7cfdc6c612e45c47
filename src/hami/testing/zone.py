"""The process's local time zone, pinned for a test: what ``time.localtime`` and a bare
``datetime.astimezone()`` use, so code that writes HAMi's zone-less local times can be tested in a
zone with daylight saving whatever zone the machine is in."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def local_zone(name: str) -> Iterator[None]:
    """Run the block with ``TZ=name`` (an IANA name, e.g. ``Europe/Berlin``), then restore the zone."""
    if not (Path("/usr/share/zoneinfo") / name).is_file():
        raise ValueError(f"no such time zone in /usr/share/zoneinfo: {name!r}")
    before = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()
