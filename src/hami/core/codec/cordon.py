"""``hami.io/device-cordon``: comma-separated GPU UUIDs (§1.4).

Section signs (§) refer to docs/design/scheduler-annotations.md.
"""

from __future__ import annotations

from collections.abc import Iterable

from hami.core.codec.errors import CodecError


def parse_cordon(value: str | None) -> frozenset[str]:
    """UUIDs trimmed, empty items skipped; an absent annotation cordons nothing."""
    if value is None:
        return frozenset()
    if not isinstance(value, str):
        raise CodecError("device cordon must be a string", "hami.io/device-cordon", type(value).__name__)
    return frozenset(item.strip() for item in value.split(",") if item.strip())


def format_cordon(uuids: Iterable[str]) -> str:
    """Sorted, so that rewriting the same set never changes the annotation."""
    items = sorted(uuids)
    for u in items:
        if "," in u or u != u.strip() or not u:
            raise CodecError("cordoned UUID must be non-empty, trimmed and contain no ','", "uuid", u)
    return ",".join(items)
