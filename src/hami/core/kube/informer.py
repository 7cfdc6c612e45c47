"""A list+watch cache for one resource, like client-go's shared informer (one handler set).

A background thread lists the resource (paged), then watches from the list's resourceVersion.
Objects stay the API's JSON dicts, keyed ``namespace/name`` (``name`` for cluster-scoped ones, as
client-go's ``MetaNamespaceKeyFunc``). Stored objects are shared: treat them as read-only.

Failure handling, as client-go's reflector:
- the watch stream ends (server timeout, dropped connection): watch again from the last
  resourceVersion seen (events and bookmarks), with no relist;
- 410 Gone (an HTTP status or an ``ERROR`` event): the resourceVersion is too old; relist;
- any other error: count it in ``hami_kube_watch_errors_total{resource,reason}``, log it once per
  reason until the informer recovers, back off exponentially (0.8 s doubling to 30 s, jittered) and
  retry the same step.

Handlers run on the informer's thread, one event at a time, after the cache is updated; one that
raises is logged and counted, and the informer goes on.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from hami.core import klog
from hami.core.kube import errors, raw
from hami.core.kube.metrics import KubeMetrics, kube_metrics
from hami.core.objects import meta_field, object_key, resource_version

log = klog.get_logger(__name__)

Obj = dict[str, Any]
Resource = tuple[str, str, str]
AddHandler = Callable[[Obj], None]
UpdateHandler = Callable[[Obj, Obj], None]
DeleteHandler = Callable[[Obj], None]

# Watches shorter than this that deliver nothing are treated as failures (client-go's
# "very short watch"), so a server that closes at once does not get a tight loop of requests.
_SHORT_WATCH = 1.0


class Backoff:
    """Exponential backoff with jitter; ``reset()`` after a success."""

    def __init__(self, initial: float, maximum: float, factor: float = 2.0, jitter: float = 1.0) -> None:
        self.initial, self.maximum, self.factor, self.jitter = initial, maximum, factor, jitter
        self._current = initial

    def next(self) -> float:
        delay = self._current * (1.0 + random.random() * self.jitter)
        self._current = min(self._current * self.factor, self.maximum)
        return min(delay, self.maximum)

    def reset(self) -> None:
        self._current = self.initial


class _Handler:
    def __init__(self, on_add: AddHandler | None, on_update: UpdateHandler | None,
                 on_delete: DeleteHandler | None) -> None:
        self.on_add, self.on_update, self.on_delete = on_add, on_update, on_delete


class Informer:
    def __init__(
        self,
        api_client: Any,
        resource: Resource = ("", "v1", "pods"),
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resync: float | None = None,
        registry: CollectorRegistry | None = None,
        page_size: int = 500,
        backoff_initial: float = 0.8,
        backoff_max: float = 30.0,
        watch_timeout: int | None = None,
    ) -> None:
        self.api_client = api_client
        group, version, plural = resource
        self.resource = resource
        self.resource_label = plural if not group else f"{plural}.{group}"
        self._path = raw.resource_path(group, version, plural, namespace)
        self._selectors = [(k, v) for k, v in (("labelSelector", label_selector),
                                                ("fieldSelector", field_selector)) if v]
        self._resync = resync
        self._page_size = page_size
        self._backoff = Backoff(backoff_initial, backoff_max)
        # client-go picks a random server-side watch timeout between 5 and 10 minutes.
        self._watch_timeout = watch_timeout or random.randint(300, 600)
        self._metrics: KubeMetrics = (
            kube_metrics(registry) if registry is not None
            else getattr(getattr(api_client, "rest_client", None), "metrics", None) or kube_metrics()
        )
        self._lock = threading.Lock()  # guards _store, _active
        self._dispatch = threading.RLock()  # serialises cache updates + handler calls
        self._store: dict[str, Obj] = {}
        self._handlers: list[_Handler] = []
        self._rv = ""
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._active: Any = None
        self._logged: set[str] = set()
        self._threads: list[threading.Thread] = []

    # --- public API -------------------------------------------------------------------------

    def start(self) -> None:
        if self._threads:
            raise RuntimeError("informer already started")
        self._threads.append(threading.Thread(
            target=self._run, name=f"informer-{self.resource_label}", daemon=True))
        if self._resync:
            self._threads.append(threading.Thread(
                target=self._resync_loop, name=f"informer-resync-{self.resource_label}", daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the threads (aborting an open watch) and wait for them up to ``timeout``."""
        self._stop.set()
        with self._lock:
            active = self._active
        if active is not None:
            with contextlib.suppress(OSError):
                raw.abort_response(active)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._metrics.informer_synced.labels(self.resource_label).set(0)

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def get(self, key: str) -> Obj | None:
        with self._lock:
            return self._store.get(key)

    def list(self) -> list[Obj]:
        with self._lock:
            return list(self._store.values())

    def last_resource_version(self) -> str:
        return self._rv

    def add_handler(self, on_add: AddHandler | None = None, on_update: UpdateHandler | None = None,
                    on_delete: DeleteHandler | None = None) -> None:
        """Register handlers; a late one first gets ``on_add`` for every cached object."""
        handler = _Handler(on_add, on_update, on_delete)
        with self._dispatch:
            self._handlers.append(handler)
            if handler.on_add is not None:
                for obj in self.list():
                    self._call(handler.on_add, obj)

    # --- the list/watch loop ----------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._list()
            except (errors.ApiError, ValueError) as exc:
                self._failed("list", exc)
                continue
            self._watch_until_gone()

    def _watch_until_gone(self) -> None:
        """Watch (and re-watch from the last resourceVersion) until 410 Gone or stop."""
        while not self._stop.is_set():
            try:
                started = time.monotonic()
                events = self._watch_once()
            except errors.Gone as exc:
                self._count("gone", f"watch from resourceVersion {self._rv}: {exc}; relisting")
                return
            except (errors.ApiError, ValueError) as exc:
                self._failed("watch", exc)
                continue
            if self._stop.is_set():
                return
            if events == 0 and time.monotonic() - started < _SHORT_WATCH:
                self._failed("watch", errors.ApiError(0, "ShortWatch",
                                                      "watch closed at once with no events"))
            elif events:
                self._recovered()

    def _list(self) -> None:
        items: dict[str, Obj] = {}
        token = ""
        while True:
            query = [*self._selectors, ("limit", str(self._page_size))]
            if token:
                query.append(("continue", token))
            page = raw.request_json(self.api_client, "GET", self._path, query=query)
            if not isinstance(page, dict):
                raise ValueError(f"list of {self.resource_label} is not an object")
            for obj in page.get("items") or []:
                if isinstance(obj, dict) and object_key(obj):
                    items[object_key(obj)] = obj
                else:
                    self._count("decode", f"list item without metadata.name skipped: {str(obj)[:200]}")
            token = meta_field(page, "continue")
            if not token:
                rv = resource_version(page)
                break
        self._recovered()
        self._replace(items, rv)

    def _watch_once(self) -> int:
        query = [*self._selectors, ("watch", "true"), ("resourceVersion", self._rv),
                 ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(self._watch_timeout))]
        response = raw.send(self.api_client, "GET", self._path, query=query,
                            timeout=(30.0, self._watch_timeout + 30.0))
        with self._lock:
            self._active = response
        events = 0
        try:
            if self._stop.is_set():
                return 0
            for line in raw.iter_lines(response):
                if self._handle_line(line):
                    events += 1
        except raw.TRANSPORT_ERRORS as exc:
            if not self._stop.is_set():
                raise errors.from_exception(exc) from exc
        finally:
            with self._lock:
                self._active = None
            raw.close_response(response)
        return events

    def _handle_line(self, line: bytes) -> bool:
        """Apply one watch event; True if it was an object event or a bookmark."""
        try:
            event = orjson.loads(line)  # each write of ours comes back here: decoded at C speed
            kind, obj = event["type"], event["object"]
            if not isinstance(obj, dict):
                raise TypeError("object is not a JSON object")
        except (ValueError, KeyError, TypeError) as exc:
            self._count("decode", f"undecodable watch event skipped: {exc}: {line[:200]!r}")
            return False
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            raise errors.from_status(code, json.dumps(obj), str(obj.get("reason") or ""))
        rv = resource_version(obj)
        if kind == "BOOKMARK":
            self._rv = rv or self._rv
            return True
        if kind not in ("ADDED", "MODIFIED", "DELETED") or not object_key(obj):
            self._count("decode", f"watch event {kind!r} without a usable object skipped")
            return False
        self._apply(kind, obj)
        self._rv = rv or self._rv
        return True

    # --- cache and handlers -----------------------------------------------------------------

    def _apply(self, kind: str, obj: Obj) -> None:
        key = object_key(obj)
        with self._dispatch:
            with self._lock:
                old = self._store.get(key)
                if kind == "DELETED":
                    self._store.pop(key, None)
                else:
                    self._store[key] = obj
            for handler in self._handlers:
                if kind == "DELETED":
                    if handler.on_delete is not None:
                        self._call(handler.on_delete, old if old is not None else obj)
                elif old is None:
                    if handler.on_add is not None:
                        self._call(handler.on_add, obj)
                elif handler.on_update is not None:
                    self._call(handler.on_update, old, obj)

    def _replace(self, items: dict[str, Obj], rv: str) -> None:
        """Swap in a fresh list and tell the handlers what changed since the last view."""
        with self._dispatch:
            with self._lock:
                old_store, self._store = self._store, items
                self._rv = rv
            for key, obj in items.items():
                old = old_store.get(key)
                for handler in self._handlers:
                    if old is None:
                        if handler.on_add is not None:
                            self._call(handler.on_add, obj)
                    elif resource_version(old) != resource_version(obj) and handler.on_update:
                        self._call(handler.on_update, old, obj)
            for key, old in old_store.items():
                if key not in items:
                    for handler in self._handlers:
                        if handler.on_delete is not None:
                            self._call(handler.on_delete, old)
        if not self._synced.is_set():
            log.info("informer %s synced: %d objects at resourceVersion %s",
                     self.resource_label, len(items), rv)
        self._synced.set()
        self._metrics.informer_synced.labels(self.resource_label).set(1)

    def _resync_loop(self) -> None:
        assert self._resync is not None
        while not self._stop.wait(self._resync):
            if not self._synced.is_set():
                continue
            with self._dispatch:
                for obj in self.list():
                    for handler in self._handlers:
                        if handler.on_update is not None:
                            self._call(handler.on_update, obj, obj)

    def _call(self, fn: Callable[..., None], *args: Obj) -> None:
        try:
            fn(*args)
        except Exception:
            self._metrics.informer_handler_errors.labels(self.resource_label).inc()
            log.error("informer %s: event handler failed", self.resource_label, exc_info=True)

    # --- errors -----------------------------------------------------------------------------

    def _count(self, reason: str, message: str) -> None:
        self._metrics.watch_errors.labels(self.resource_label, reason).inc()
        if reason in self._logged:
            log.v(4).info("informer %s: %s", self.resource_label, message)
        else:
            self._logged.add(reason)
            log.warning("informer %s: %s", self.resource_label, message)

    def _failed(self, step: str, exc: Exception) -> None:
        self._count(errors.error_reason(exc), f"{step} failed: {exc}")
        self._stop.wait(self._backoff.next())

    def _recovered(self) -> None:
        self._backoff.reset()
        if self._logged:
            log.info("informer %s: list/watch working again", self.resource_label)
            self._logged.clear()

