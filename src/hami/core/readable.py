"""Numbers as a person reads them in a report: ``1.5 GiB``, not ``1.49414 GiB``; ``1,530``, not
``1530.0``; ``37.5%``. One helper for every tool that prints to people (hami-doctor's findings and
tables), so the same quantity reads the same everywhere. Durations have their own (Go's ``5m0s``,
``hami.core.duration.format_duration``)."""

from __future__ import annotations

import math

MIB_PER_GIB = 1024
BYTES_PER_MIB = 1 << 20


def number(value: float, decimals: int = 1) -> str:
    """Thousands grouped, at most ``decimals`` decimals, no trailing zeros: ``1,530``, ``37.5``, ``2``."""
    if not math.isfinite(value):
        return str(value)
    text = f"{value:,.{decimals}f}" if decimals > 0 else f"{round(value):,}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def percent(value: float) -> str:
    """``37.5%``, ``100%``."""
    return f"{number(value)}%"


def mib(value: float) -> str:
    """A size given in MiB: ``512 MiB``; from 1 GiB on, GiB with one decimal below 10 GiB (``1.5 GiB``
    for 1,530 MiB) and whole GiB above (``40 GiB``, ``1,024 GiB``)."""
    if abs(value) < MIB_PER_GIB:
        return f"{number(value, 0)} MiB"
    gib = value / MIB_PER_GIB
    return f"{number(gib, 1 if abs(gib) < 10 else 0)} GiB"


def size_bytes(value: float) -> str:
    """A size given in bytes, as ``mib`` writes it."""
    return mib(value / BYTES_PER_MIB)
