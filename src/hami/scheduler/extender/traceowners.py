"""Which pod may join a trace (docs/design/tracing.md §3).

The webhook's MAC covers only the namespace and the traceparent (a pod has no UID at admission),
so a tenant can copy one pod's context onto another pod of the namespace. The extender holds every
pod in its informer's cache: a pod joins a trace only if no other pod carries it, or if this pod is
the one that trace was first accepted for. The memory of accepted (and deleted carriers') traces
is bounded; a trace forgotten is judged on the cache alone again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

from hami.core import tracing
from hami.core.objects import uid_of

REMEMBERED: Final = 16_384  # trace IDs: about 4 MB


class TraceOwners:
    """Fed by the pod informer's handlers (``seen``, ``gone``); asked by filter and bind (``admit``)."""

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self._lock = threading.Lock()  # handlers and request threads
        self._remembered = remembered
        self._carriers: dict[str, set[str]] = {}  # trace ID -> UIDs of the cached pods that carry it
        self._carried: dict[str, str] = {}  # pod UID -> the trace ID it carries
        self._owners: OrderedDict[str, str] = OrderedDict()  # trace ID -> the UID it belongs to

    def seen(self, pod: Mapping[str, Any]) -> None:
        """A pod added or updated in the cache (its annotation unverified: a copy counts too)."""
        uid, trace = uid_of(pod), tracing.trace_id(pod)
        with self._lock:
            before = self._carried.get(uid, "")
            if before == trace:
                return
            if before:
                self._drop(uid, before)
            if trace:
                self._carried[uid] = trace
                self._carriers.setdefault(trace, set()).add(uid)

    def gone(self, pod: Mapping[str, Any]) -> None:
        """A pod deleted (or finished): its trace stays its own while remembered."""
        uid = uid_of(pod)
        with self._lock:
            trace = self._carried.pop(uid, "")
            if trace:
                self._drop(uid, trace)
                self._remember(trace, uid)

    def admit(self, pod: Mapping[str, Any], trace: str) -> bool:
        """Whether ``pod`` may join ``trace`` (its verified context): the pod it was accepted for,
        or, for a trace not yet accepted, the only cached pod that carries it."""
        uid = uid_of(pod)
        with self._lock:
            owner = self._owners.get(trace)
            if owner is not None:
                return owner == uid
            if self._carriers.get(trace, set()) - {uid}:
                return False  # which of them is the copy is unknowable: neither joins
            self._remember(trace, uid)
            return True

    def _drop(self, uid: str, trace: str) -> None:
        carriers = self._carriers.get(trace)
        if carriers is not None:
            carriers.discard(uid)
            if not carriers:
                del self._carriers[trace]

    def _remember(self, trace: str, uid: str) -> None:
        if trace in self._owners:
            return  # the first owner stays
        self._owners[trace] = uid
        if len(self._owners) > self._remembered:
            self._owners.popitem(last=False)
