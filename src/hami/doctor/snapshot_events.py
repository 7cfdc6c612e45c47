"""When the scheduler first decided on each pod, to a fraction of a second, from the pods' events.

The API keeps a pod's times in whole seconds (``creationTimestamp``, ``hami.io/vgpu-time``,
``hami.io/bind-time``), so the order of pods created in one second is lost there. Their events keep
it: HAMi's extender records ``FilteringSucceed`` / ``FilteringFailed`` on every filter, kube-scheduler
``Scheduled`` / ``FailedScheduling``; client-go (and ``hami.core.kube.events``) names each event
``<object>.<unix nanoseconds in hex>`` of the moment it was made, and events.k8s.io/v1 events carry
``eventTime`` in microseconds. A repeated event is counted on the first one, so the earliest of a
pod's events is its first filter. A name's time counts only when it falls in the second the event's
own ``firstTimestamp`` says (an event named otherwise is not read as a time). Events expire (an
hour by default): pods older than that have no such time, and the replay searches for their order.

The events also name GPU pods the API no longer lists: HAMi's extender placed them (its
``FilteringSucceed`` / ``BindingSucceed``; it records none for a pod that asks for no device), and
they were deleted before the snapshot, taking with them which cards they held and until when.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final

from hami.core.codec import CodecError
from hami.core.codec.nodelock import parse_rfc3339

# The scheduler's decisions on a pod: HAMi's filter, and kube-scheduler's outcome of a cycle.
DECISIONS: Final = frozenset({"FilteringSucceed", "FilteringFailed", "Scheduled", "FailedScheduling"})
# HAMi's extender placed a GPU pod.
PLACEMENTS: Final = frozenset({"FilteringSucceed", "BindingSucceed"})
_MAX_HEX: Final = 20  # digits of a nanosecond Unix time, with room to spare


def _time(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_rfc3339(text, "time").timestamp()
    except CodecError:
        return None


def _from_name(name: str, first: float | None) -> float | None:
    _, dot, suffix = name.rpartition(".")
    if not dot or not 0 < len(suffix) <= _MAX_HEX or first is None:
        return None
    try:
        t = int(suffix, 16) / 1e9
    except ValueError:
        return None
    return t if math.floor(t) == first else None


def _pod_uid(event: Mapping[str, Any]) -> str | None:
    ref = event.get("involvedObject") or event.get("regarding")
    if not isinstance(ref, Mapping) or ref.get("kind") != "Pod":
        return None
    uid = ref.get("uid")
    return uid if isinstance(uid, str) and uid else None


def _when(event: Mapping[str, Any]) -> tuple[float, bool] | None:
    """When the event was made, and whether to a fraction of a second."""
    exact = _time(event.get("eventTime"))
    if exact is not None and exact != int(exact):
        return exact, True
    whole = _time(event.get("firstTimestamp")) or exact
    meta = event.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    t = _from_name(name, whole) if isinstance(name, str) else None
    if t is not None:
        return t, True
    return None if whole is None else (whole, False)


def decided_at(event: Mapping[str, Any]) -> tuple[str, float] | None:
    """(pod uid, when) of one scheduling decision event; None for any other event or no time to a
    fraction of a second."""
    if event.get("reason") not in DECISIONS:
        return None
    uid, when = _pod_uid(event), _when(event)
    return None if uid is None or when is None or not when[1] else (uid, when[0])


def first_attempts(events: Iterable[Any]) -> dict[str, float]:
    """Pod uid -> the earliest decision its events record."""
    first: dict[str, float] = {}
    for event in events:
        got = decided_at(event) if isinstance(event, Mapping) else None
        if got is not None:
            uid, t = got
            first[uid] = min(first.get(uid, t), t)
    return first


def gone_since(events: Iterable[Any], listed: Collection[str]) -> tuple[float | None, int]:
    """The first placement of a GPU pod whose uid is not in ``listed`` (the pods the API lists), and
    how many such pods the events name."""
    placed: dict[str, float] = {}
    for event in events:
        if not isinstance(event, Mapping) or event.get("reason") not in PLACEMENTS:
            continue
        uid, when = _pod_uid(event), _when(event)
        if uid is not None and when is not None and uid not in listed:
            placed[uid] = min(placed.get(uid, when[0]), when[0])
    return min(placed.values(), default=None), len(placed)


def oldest(events: Iterable[Any]) -> float | None:
    """When the oldest of the events was made: what happened before it, they cannot say (the API
    server drops events after --event-ttl, an hour by default)."""
    times = [w[0] for e in events if isinstance(e, Mapping) and (w := _when(e)) is not None]
    return min(times, default=None)
