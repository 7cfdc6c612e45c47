"""`?watch=1`: a chunked stream of JSON event lines, as the real API server writes it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hami.testing.kubeapi import errors
from hami.testing.kubeapi.resources import ResourceType
from hami.testing.kubeapi.selectors import Matcher, combined
from hami.testing.kubeapi.store import Change, Obj, Store

Event = dict[str, Any]
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(frozen=True)
class WatchRequest:
    rtype: ResourceType
    namespace: str | None
    resource_version: str
    timeout: float | None
    bookmarks: bool
    send_initial: bool
    match: Matcher

    @classmethod
    def from_query(cls, rtype: ResourceType, namespace: str | None, query: dict[str, str]) -> WatchRequest:
        """Validates everything up front so a bad watch fails with a plain 400, not mid-stream."""
        rv = query.get("resourceVersion", "")
        if rv and not rv.isdigit():
            raise errors.bad_request(f"invalid resource version: {rv!r}")
        raw_timeout = query.get("timeoutSeconds", "")
        if raw_timeout and not raw_timeout.isdigit():
            raise errors.bad_request(f"invalid timeoutSeconds: {raw_timeout!r}")
        send_initial = query.get("sendInitialEvents") == "true"
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        if send_initial and not bookmarks:
            raise errors.invalid("ListOptions", "", "allowWatchBookmarks", "Required value: "
                                 "allowWatchBookmarks must be set when sendInitialEvents is set")
        match = combined(rtype, query.get("labelSelector", ""), query.get("fieldSelector", ""))
        return cls(rtype, namespace, rv, float(raw_timeout) if raw_timeout else None, bookmarks,
                   send_initial, match)

    def visible(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        in_ns = self.namespace is None or obj.get("metadata", {}).get("namespace") == self.namespace
        return in_ns and self.match(obj)

    def translate(self, change: Change) -> Event | None:
        """What this watcher sees: objects moving in or out of its selector are ADDED / DELETED."""
        was = change.type != "ADDED" and self.visible(change.old)
        now = self.visible(change.obj)
        if change.type == "DELETED":
            return _event("DELETED", change.obj) if now else None
        if was and now:
            return _event("MODIFIED", change.obj)
        if now:
            return _event("ADDED", change.obj)
        if was:
            return _event("DELETED", change.obj)
        return None

    def bookmark(self, rv: int, initial_end: bool = False) -> Event:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        return {"type": "BOOKMARK", "object": {"kind": self.rtype.kind, "apiVersion": self.rtype.api_version,
                                               "metadata": meta}}


def _event(kind: str, obj: Obj) -> Event:
    return {"type": kind, "object": obj}


def error_event(err: errors.ApiError) -> Event:
    return {"type": "ERROR", "object": err.status()}


def stream(
    store: Store,
    req: WatchRequest,
    stopping: Callable[[], bool],
    bookmark_interval: float,
    poll: float = 0.2,
) -> Iterator[Event]:
    """The events for one watch, ending at timeoutSeconds, on server stop, or after a 410 ERROR.

    rv "" or "0" (and sendInitialEvents=true) start with synthetic ADDED events for the current
    state; any other rv replays the retained history after it, or yields one ERROR 410 Expired.
    """
    deadline = None if req.timeout is None else time.monotonic() + req.timeout
    if req.resource_version in ("", "0") or req.send_initial:
        items, rv = store.snapshot(req.rtype, req.namespace, req.match)
        for item in items:
            yield _event("ADDED", item)
        if req.send_initial:
            yield req.bookmark(rv, initial_end=True)
    else:
        rv = int(req.resource_version)
    last_bookmark = time.monotonic()
    while not stopping():
        try:
            changes, rv_now = store.changes_since(rv, req.rtype.key)
        except errors.ApiError as err:
            yield error_event(err)
            return
        for change in changes:
            event = req.translate(change)
            if event is not None:
                yield event
        rv = rv_now
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return
        if req.bookmarks and now - last_bookmark >= bookmark_interval:
            last_bookmark = now
            yield req.bookmark(rv)
        wait = poll if deadline is None else min(poll, deadline - now)
        store.wait_for_change(rv, max(wait, 0.0))
