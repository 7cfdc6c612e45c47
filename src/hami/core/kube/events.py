"""core/v1 Events, recorded the way client-go's event recorder does it, without blocking callers.

``EventRecorder.event`` puts the event on a bounded queue (1000, as client-go's broadcaster) and
returns; a worker thread writes it. A repeat of an event already written (same source, object, type,
reason and message) is not a new Event: like client-go's ``EventCorrelator`` the worker patches the
existing one with ``count + 1`` and a new ``lastTimestamp`` (and creates it again if it was deleted).
Names are ``<object name>.<unix nanoseconds in hex>``; events about cluster-scoped objects (nodes) go
to the ``default`` namespace. client-go's similar-message aggregation and spam filter are not done.

Failures never reach the caller: they are counted in ``hami_kube_events_total{result}``
(``created``, ``aggregated``, ``dropped`` when the queue is full, ``error``) and logged once per
reason until a write succeeds again.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from hami.core import klog
from hami.core.kube import errors, raw
from hami.core.kube.metrics import kube_metrics
from hami.core.objects import name_of, namespace_of, resource_version, uid_of

log = klog.get_logger(__name__)

NORMAL = "Normal"
WARNING = "Warning"

_QUEUE_SIZE = 1000
_CACHE_SIZE = 4096  # client-go's maxLruCacheEntries


@dataclass(frozen=True)
class ObjectRef:
    """The ``involvedObject`` of an event."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"
    resource_version: str = ""
    field_path: str = ""

    @classmethod
    def from_object(cls, obj: dict[str, Any], kind: str | None = None,
                    api_version: str | None = None) -> ObjectRef:
        """A reference to an API object dict (list items carry no kind: pass it)."""
        return cls(
            kind=kind or str(obj.get("kind", "")),
            name=name_of(obj),
            namespace=namespace_of(obj),
            uid=uid_of(obj),
            api_version=api_version or str(obj.get("apiVersion", "v1")),
            resource_version=resource_version(obj),
        )


@dataclass(frozen=True)
class _Pending:
    ref: ObjectRef
    type: str
    reason: str
    message: str
    at: float


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int
    first: str


def _timestamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))  # cheaper than datetime


class EventRecorder:
    """Records Events for ``component`` running on ``host`` (the event ``source``)."""

    def __init__(
        self,
        api_client: Any,
        component: str,
        host: str = "",
        *,
        registry: CollectorRegistry | None = None,
        queue_size: int = _QUEUE_SIZE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api_client = api_client
        self.component = component
        self.host = host
        self._metrics = kube_metrics(registry) if registry is not None else (
            getattr(getattr(api_client, "rest_client", None), "metrics", None) or kube_metrics()
        )
        self._clock = clock
        self._queue: queue.Queue[_Pending | threading.Event | None] = queue.Queue(queue_size)
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._logged: set[str] = set()
        self._thread = threading.Thread(target=self._work, name=f"events-{component}", daemon=True)
        self._thread.start()

    def event(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        """Queue an event; returns at once. ``type_`` is ``Normal`` or ``Warning``."""
        if type_ not in (NORMAL, WARNING):
            raise ValueError(f"event type must be {NORMAL} or {WARNING}, got {type_!r}")
        try:
            self._queue.put_nowait(_Pending(ref, type_, reason, message, self._clock()))
        except queue.Full:
            self._metrics.events.labels("dropped").inc()
            self._log_once("dropped", f"event queue full, dropping {type_} {reason} for {ref.name}")

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every event queued so far has been written (or has failed)."""
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Write what is queued (up to ``timeout``), then stop the worker."""
        self.flush(timeout)
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                self._write(item)
            except errors.ApiError as exc:
                self._metrics.events.labels("error").inc()
                self._log_once(f"status_{exc.status}", f"unable to write event {item.reason}: {exc}")
            except Exception:
                self._metrics.events.labels("error").inc()
                log.warning("unable to write event %s", item.reason, exc_info=True)

    def _write(self, ev: _Pending) -> None:
        ref = ev.ref
        key = (ref.kind, ref.namespace, ref.name, ref.uid, ref.api_version, ref.field_path,
               ev.type, ev.reason, ev.message)
        now = _timestamp(ev.at)
        seen = self._seen.get(key)
        if seen is not None:
            # Count only what the server has accepted, so a failed write is not counted twice.
            bumped = _Seen(seen.name, seen.namespace, seen.count + 1, seen.first)
            path = raw.resource_path("", "v1", "events", namespace=seen.namespace, name=seen.name)
            patch = {"count": bumped.count, "lastTimestamp": now, "message": ev.message}
            try:
                raw.call(self.api_client, "PATCH", path, body=patch, content_type=raw.STRATEGIC_MERGE_PATCH)
            except errors.NotFound:
                self._create(ev, bumped, now)
            else:
                self._metrics.events.labels("aggregated").inc()
            self._seen[key] = bumped
            self._seen.move_to_end(key)
            self._ok()
            return
        seen = _Seen(name=f"{ref.name}.{int(ev.at * 1e9):x}", namespace=ref.namespace or "default",
                     count=1, first=now)
        self._create(ev, seen, now)
        self._seen[key] = seen
        if len(self._seen) > _CACHE_SIZE:
            self._seen.popitem(last=False)
        self._ok()

    def _create(self, ev: _Pending, seen: _Seen, now: str) -> None:
        ref = ev.ref
        involved = {"kind": ref.kind, "name": ref.name, "apiVersion": ref.api_version}
        for field, value in (("namespace", ref.namespace), ("uid", ref.uid),
                             ("resourceVersion", ref.resource_version), ("fieldPath", ref.field_path)):
            if value:
                involved[field] = value
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": seen.name, "namespace": seen.namespace},
            "involvedObject": involved,
            "reason": ev.reason,
            "message": ev.message,
            "source": {"component": self.component, **({"host": self.host} if self.host else {})},
            "firstTimestamp": seen.first,
            "lastTimestamp": now,
            "count": seen.count,
            "type": ev.type,
            "reportingComponent": self.component,
            "reportingInstance": self.host,
        }
        path = raw.resource_path("", "v1", "events", namespace=seen.namespace)
        # AlreadyExists: it is there; client-go does not retry that either.
        with contextlib.suppress(errors.Conflict):
            raw.call(self.api_client, "POST", path, body=body)
        self._metrics.events.labels("created").inc()

    def _log_once(self, reason: str, message: str) -> None:
        if reason in self._logged:
            log.v(4).info("%s", message)
        else:
            self._logged.add(reason)
            log.warning("event recorder: %s", message)

    def _ok(self) -> None:
        if self._logged:
            self._logged.clear()
