"""`?watch=1`: a chunked stream of JSON event lines, as the real API server writes it."""

from __future__ import annotations

import json
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

    def translate(self, change: Change) -> str | None:
        """The event type this watcher sees, if any: objects moving in or out of its selector are
        ADDED / DELETED."""
        was = change.type != "ADDED" and self.visible(change.old)
        now = self.visible(change.obj)
        if change.type == "DELETED":
            return "DELETED" if now else None
        if was and now:
            return "MODIFIED"
        if now:
            return "ADDED"
        if was:
            return "DELETED"
        return None

    def bookmark(self, rv: int, initial_end: bool = False) -> Event:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        return {"type": "BOOKMARK", "object": {"kind": self.rtype.kind, "apiVersion": self.rtype.api_version,
                                               "metadata": meta}}


def encode(event: Event) -> bytes:
    """One line of the stream, as json.dumps writes it."""
    return json.dumps(event).encode() + b"\n"


def _line(kind: str, obj_json: bytes) -> bytes:
    return b'{"type": "%s", "object": %s}\n' % (kind.encode(), obj_json)


def stream(
    store: Store,
    req: WatchRequest,
    stopping: Callable[[], bool],
    bookmark_interval: float,
    poll: float = 0.2,
) -> Iterator[list[bytes]]:
    """The event lines for one watch, in batches of what is ready at once (a batch is one write);
    ends at timeoutSeconds, on server stop, or after a 410 ERROR.

    rv "" or "0" (and sendInitialEvents=true) start with synthetic ADDED events for the current
    state; any other rv replays the retained history after it, or yields one ERROR 410 Expired.
    """
    deadline = None if req.timeout is None else time.monotonic() + req.timeout
    if req.resource_version in ("", "0") or req.send_initial:
        items, rv = store.snapshot(req.rtype, req.namespace, req.match)
        initial = [_line("ADDED", item.obj_json) for item in items]
        if req.send_initial:
            initial.append(encode(req.bookmark(rv, initial_end=True)))
        if initial:
            yield initial
    else:
        rv = int(req.resource_version)
    last_bookmark = time.monotonic()
    while not stopping():
        try:
            changes, rv_now = store.changes_since(rv, req.rtype.key)
        except errors.ApiError as err:
            yield [encode({"type": "ERROR", "object": err.status()})]
            return
        lines = []
        for change in changes:
            kind = req.translate(change)
            if kind is not None:
                lines.append(_line(kind, change.obj_json))
        if lines:
            yield lines
        rv = rv_now
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return
        if req.bookmarks and now - last_bookmark >= bookmark_interval:
            last_bookmark = now
            yield [encode(req.bookmark(rv))]
        wait = poll if deadline is None else min(poll, deadline - now)
        store.wait_for_change(rv, req.rtype.key, max(wait, 0.0))
