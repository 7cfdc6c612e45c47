"""Which pod an Allocate call is for: HAMi's pending-pod test, the order among several, and this
plugin's own pod writes until the informer shows them (§C.7).

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from hami.core import annotations as ann
from hami.core.objects import annotations_of, object_key, resource_version

PENDING_PHASES = (ann.BIND_PHASE_ALLOCATING, ann.BIND_PHASE_SUCCESS)


class WrittenPods:
    """Our own pod writes until the informer shows them.

    The kubelet calls Allocate once per container, back to back; the second call must see the
    annotation the first one erased even when the watch event has not arrived yet. An entry is
    used while the cached copy still has one of the resourceVersions we wrote over.
    """

    LIMIT = 256

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[frozenset[str], dict[str, Any]]] = {}

    def record(self, before: dict[str, Any], after: dict[str, Any]) -> None:
        key = object_key(after)
        with self._lock:
            stale, _ = self._entries.pop(key, (frozenset(), {}))
            self._entries[key] = (stale | {resource_version(before)}, after)
            while len(self._entries) > self.LIMIT:
                del self._entries[next(iter(self._entries))]

    def resolve(self, key: str, cached: dict[str, Any] | None) -> dict[str, Any] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return cached
            stale, written = entry
            if cached is None or resource_version(cached) in stale:
                return written
            del self._entries[key]
            return cached


class PodCache(Protocol):
    """The core informer's read side, over pods bound to this node."""

    def list(self) -> list[dict[str, Any]]: ...

    def get(self, key: str) -> dict[str, Any] | None: ...

    def has_synced(self) -> bool: ...


def is_pending_for(pod: dict[str, Any], node: str) -> bool:
    """HAMi's GetPendingPod test: Pending, bind-time set, bind-phase allocating/success, vgpu-node ours."""
    annos = annotations_of(pod)
    return (
        (pod.get("status") or {}).get("phase") == "Pending"
        and ann.POD_BIND_TIME in annos
        and annos.get(ann.POD_BIND_PHASE) in PENDING_PHASES
        and annos.get(ann.POD_VGPU_NODE) == node
    )


def bind_order(pod: dict[str, Any]) -> tuple[bool, int]:
    """Which pending pod an Allocate serves first: one still allocating, then the earliest bound."""
    annos = annotations_of(pod)
    try:
        bound_at = int(annos.get(ann.POD_BIND_TIME, "0"))
    except ValueError:
        bound_at = 0
    return annos.get(ann.POD_BIND_PHASE) != ann.BIND_PHASE_ALLOCATING, bound_at
