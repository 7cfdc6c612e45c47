"""Durations: Go's syntax for every flag, environment variable and message; Prometheus' for windows.

Go syntax (``time.ParseDuration``) is an optional sign and one or more decimal numbers, each with a
unit: ``300ms``, ``1.5h``, ``1h30m``, ``-1s``; units ``ns``, ``us`` (or ``µs``), ``ms``, ``s``, ``m``,
``h``, and ``0`` alone is zero. HAMi's duration settings (``--node-lock-timeout``,
``HAMI_NODELOCK_EXPIRE``, ``HAMI_RESYNC_INTERVAL``) take exactly this, and every duration flag of
this project does too; ``format_duration`` writes Go's ``Duration.String()`` (``1h30m0s``,
``500ms``, ``0s``), so a value printed in a log or message can be pasted back into a flag.

Two deliberate extensions, each opted into where it applies: ``bare_seconds`` also reads a plain
number as seconds, for settings that HAMi itself takes in seconds (``--kube-timeout=30``) and for
our own CLIs' existing seconds flags; and a negative duration is refused unless ``negative`` says
it makes sense (no timeout or interval does).

Prometheus durations (``7d``, ``1w``, ``1h30m``: whole numbers, units ``ms`` to ``y`` in
descending order) are a different syntax, accepted only where the value is handed to Prometheus as
it is (``hami-tune --window``, a PromQL range; the demo's ``--scrape-interval``).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Final

NANOSECOND: Final = 1
MICROSECOND: Final = 1_000
MILLISECOND: Final = 1_000_000
SECOND: Final = 1_000_000_000
MINUTE: Final = 60 * SECOND
HOUR: Final = 60 * MINUTE

# Go's unitMap: "µs" is U+00B5 (micro sign), "μs" U+03BC (Greek mu).
_UNITS: Final = {
    "ns": NANOSECOND, "us": MICROSECOND, "µs": MICROSECOND, "μs": MICROSECOND,
    "ms": MILLISECOND, "s": SECOND, "m": MINUTE, "h": HOUR,
}
_OVERFLOW: Final = 1 << 63
_DIGITS: Final = frozenset("0123456789")
_BARE_SECONDS: Final = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")

GO_SYNTAX: Final = "a Go duration such as 300ms, 90s, 5m, 1.5h or 1h30m (units ns, us, ms, s, m, h)"
PROMETHEUS_SYNTAX: Final = "a Prometheus duration such as 30m, 6h, 7d or 1w (units ms, s, m, h, d, w, y)"

_PROMETHEUS: Final = re.compile(
    r"(?:([0-9]+)y)?(?:([0-9]+)w)?(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?(?:([0-9]+)ms)?"
)
_PROMETHEUS_UNITS: Final = (
    365 * 24 * 3600 * 1000, 7 * 24 * 3600 * 1000, 24 * 3600 * 1000, 3600 * 1000, 60 * 1000, 1000, 1,
)


class DurationError(ValueError):
    """A value that is not a duration of the accepted syntax; ``str()`` names the syntax."""


def _quote(text: str) -> str:
    """Go ``time.quote``: double quotes, ``"`` and ``\\`` escaped, other bytes outside printable
    ASCII as ``\\xHH``."""
    out: list[str] = []
    for c in text:
        if c < " " or c >= "\x80":
            out.extend(f"\\x{b:02x}" for b in c.encode("utf-8", "surrogatepass"))
        else:
            out.append("\\" + c if c in '"\\' else c)
    return '"' + "".join(out) + '"'


def _invalid(text: str, why: str = "invalid duration") -> DurationError:
    return DurationError(f"time: {why} {_quote(text)}")


def _digits(s: str, i: int) -> int:
    """The end of the run of decimal digits starting at ``i``."""
    while i < len(s) and s[i] in _DIGITS:
        i += 1
    return i


def parse_go_duration(text: str) -> int:
    """Go ``time.ParseDuration``, to the nanosecond, with Go's range (int64) and error texts."""
    s, neg = text, False
    if s[:1] in ("-", "+"):
        neg, s = s[0] == "-", s[1:]
    if s == "0":
        return 0
    if not s:
        raise _invalid(text)
    total, i = 0, 0
    while i < len(s):
        if not (s[i] == "." or s[i] in _DIGITS):
            raise _invalid(text)
        end = _digits(s, i)
        pre = end > i
        whole = int(s[i:end]) if pre else 0
        if whole > _OVERFLOW:
            raise _invalid(text)
        frac, scale, post = 0, 1.0, False
        if end < len(s) and s[end] == ".":
            start = end + 1
            end = _digits(s, start)
            post = end > start
            # Go's leadingFraction: digits past int64 precision are read and ignored.
            for c in s[start:end]:
                if frac > (_OVERFLOW - 1) // 10 or frac * 10 + int(c) > _OVERFLOW:
                    break
                frac, scale = frac * 10 + int(c), scale * 10
        if not pre and not post:
            raise _invalid(text)  # no digits, e.g. ".s"
        unit_end = end
        while unit_end < len(s) and s[unit_end] != "." and s[unit_end] not in _DIGITS:
            unit_end += 1
        if unit_end == end:
            raise _invalid(text, "missing unit in duration")
        unit = _UNITS.get(s[end:unit_end])
        if unit is None:
            raise DurationError(f"time: unknown unit {_quote(s[end:unit_end])} in duration {_quote(text)}")
        if whole > _OVERFLOW // unit:
            raise _invalid(text)
        value = whole * unit
        if frac:
            # Go computes the fraction in float64 ("nanosecond accurate for fractions of hours").
            value += int(float(frac) * (float(unit) / scale))
            if value > _OVERFLOW:
                raise _invalid(text)
        total += value
        if total > _OVERFLOW:
            raise _invalid(text)
        i = unit_end
    if neg:
        return -total
    if total > _OVERFLOW - 1:
        raise _invalid(text)
    return total


def _frac(value: int, digits: int) -> tuple[str, int]:
    """Go ``fmtFrac``: ``value / 10**digits`` split into ``.fraction`` (trailing zeros and a bare
    point omitted) and the integer part."""
    whole, rest = divmod(value, 10**digits)
    text = f"{rest:0{digits}d}".rstrip("0")
    return (f".{text}" if text else ""), whole


def format_go_duration(ns: int) -> str:
    """Go ``Duration.String()`` of ``ns`` nanoseconds: ``1h30m0s``, ``1.5s``, ``500ms``, ``300µs``, ``0s``."""
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u == 0:
        return "0s"
    if u < SECOND:
        unit, digits = ("ns", 0) if u < MICROSECOND else ("µs", 3) if u < MILLISECOND else ("ms", 6)
        frac, whole = _frac(u, digits)
        return f"{sign}{whole}{frac}{unit}"
    frac, secs = _frac(u, 9)
    minutes, secs = divmod(secs, 60)
    hours, minutes = divmod(minutes, 60)
    out = f"{secs}{frac}s"
    if minutes or hours:
        out = f"{minutes}m{out}"
    if hours:
        out = f"{hours}h{out}"
    return sign + out


def to_nanoseconds(value: timedelta | float) -> int:
    """A ``timedelta`` exactly, or seconds rounded to the nanosecond."""
    if isinstance(value, timedelta):
        return (value.days * 86_400 + value.seconds) * SECOND + value.microseconds * MICROSECOND
    return round(value * SECOND)


def parse_duration(text: str, *, bare_seconds: bool = False, negative: bool = False) -> timedelta:
    """A duration setting as a ``timedelta`` (microsecond resolution, finer parts dropped).

    Go syntax; with ``bare_seconds`` also a plain number of seconds (``30``, ``2.5``). A negative
    value raises unless ``negative``. ``DurationError`` says which syntax is accepted.
    """
    syntax = GO_SYNTAX + (", or a number of seconds" if bare_seconds else "")
    sign, body = (-1 if text[:1] == "-" else 1), text[1:] if text[:1] in ("-", "+") else text
    try:
        if bare_seconds and _BARE_SECONDS.fullmatch(body):
            ns = sign * round(float(body) * SECOND)
            if abs(ns) >= _OVERFLOW:
                raise _invalid(text)
        else:
            ns = parse_go_duration(text)
    except DurationError:
        raise DurationError(f"invalid duration {text!r}: want {syntax}") from None
    if ns < 0 and not negative:
        raise DurationError(f"invalid duration {text!r}: must not be negative")
    # Truncated toward zero, like Go's Duration.Microseconds().
    magnitude = timedelta(microseconds=abs(ns) // MICROSECOND)
    return magnitude if ns >= 0 else -magnitude


def format_duration(value: timedelta | float) -> str:
    """Go ``Duration.String()`` of a ``timedelta`` or of seconds: ``5m0s``, ``1.5s``, ``28s``."""
    return format_go_duration(to_nanoseconds(value))


def duration_flag(*, bare_seconds: bool = False, negative: bool = False) -> Callable[[str], timedelta]:
    """An argparse ``type=`` for a duration flag; a bad value is a usage error naming the syntax."""

    def parse(text: str) -> timedelta:
        try:
            return parse_duration(text, bare_seconds=bare_seconds, negative=negative)
        except DurationError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = "duration"  # argparse names the type in its message: "invalid duration value"
    return parse


def prometheus_duration_flag(text: str) -> str:
    """An argparse ``type=`` for a value handed to Prometheus as it is (a range, an interval):
    checked here rather than failing every query, and returned unchanged."""
    try:
        parse_prometheus_duration(text)
    except DurationError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def parse_prometheus_duration(text: str) -> timedelta:
    """Prometheus ``model.ParseDuration``: ``7d``, ``1w``, ``1h30m``, ``250ms``; ``0`` is zero."""
    if text == "0":
        return timedelta(0)
    m = _PROMETHEUS.fullmatch(text)
    if not text or m is None:
        raise DurationError(f"invalid duration {text!r}: want {PROMETHEUS_SYNTAX}")
    ms = sum(int(g) * unit for g, unit in zip(m.groups(), _PROMETHEUS_UNITS, strict=True) if g)
    return timedelta(milliseconds=ms)
