"""`?watch=1`: a chunked stream of JSON event lines, as the real API server writes it.

Changes are pushed, not polled: the store offers each change to the `Feed` of every watch of its
resource, under its lock and so in resourceVersion order, and the thread that made the change
writes it out right after, without blocking. A watch's own thread only waits: for bookmarks, its
timeout, the server's stop, or a write that would have blocked, which it finishes. Waking each
watch's thread for each change cost more CPU than writing the change.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
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


class Feed:
    """One watch's stream: what it has still to send, and the writes to its socket.

    Queued items are ready lines, or changes with the event type to send (None: what `translate`
    says). Whoever holds `_writing` writes: a writer's `pump` (never blocking) or the watch's own
    thread (`flush`, blocking), which takes over the rest of a write that would have blocked.
    """

    def __init__(self, req: WatchRequest, sock: socket.socket, limit: int | None) -> None:
        self.req = req
        self._sock = sock
        self._queue: deque[bytes | tuple[str | None, Change]] = deque()
        self._writing = threading.Lock()
        self._left = b""  # the unsent end of a write that would have blocked
        self._wakeup = threading.Event()
        self._limit = limit  # a drop_watch fault: events to send before cutting the connection
        self._sent = 0
        self._cut_due = False
        self._done = False  # cut, or the client went away: nothing more is written

    # -- the store's side (`store.Follower`) ------------------------------------------------------

    def offer(self, change: Change) -> None:
        """Called with the store's lock held, in resourceVersion order."""
        self._queue.append((None, change))

    def pump(self) -> None:
        """Writes what is queued now if the socket takes it without blocking; else leaves it to
        the watch's thread. Called by the writing thread after each change, outside the lock."""
        while self._queue and not self._done and self._writing.acquire(blocking=False):
            try:
                if self._left:
                    return  # the watch's thread finishes the blocked write first; it is awake
                data = self._take()
                if not data:
                    continue
                try:
                    written = self._sock.send(data, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    written = 0
                if written < len(data):
                    self._left = data[written:]
                    self._wakeup.set()
                elif self._cut_due:
                    self._cut()
            except OSError:
                self._end()
            finally:
                self._writing.release()

    def wake(self) -> None:
        self._wakeup.set()

    # -- the watch's own thread -------------------------------------------------------------------

    def run(self, store: Store, stopping: Callable[[], bool], bookmark_interval: float,
            poll: float = 0.2) -> bool:
        """Serves the watch until timeoutSeconds, the server's stop, a cut, or a 410 ERROR; True
        when the stream ended cleanly (closing chunk written).

        rv "" or "0" (and sendInitialEvents=true) start with synthetic ADDED events for the
        current state; any other rv replays the retained history after it, or sends one ERROR
        410 Expired.
        """
        if self._limit == 0:
            self._cut()
            return False
        deadline = None if self.req.timeout is None else time.monotonic() + self.req.timeout
        key = self.req.rtype.key
        try:
            store.follow(key, self, lambda: self._begin(store))
            following = True
        except errors.ApiError as err:
            self._queue.append(encode({"type": "ERROR", "object": err.status()}))
            following = False
        last_bookmark = time.monotonic()
        try:
            while following and not stopping() and not self._done:
                self._wakeup.clear()
                self.flush()
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                if self.req.bookmarks and now - last_bookmark >= bookmark_interval:
                    last_bookmark = now
                    store.at_rv(self._offer_bookmark)
                    continue
                wait = poll if deadline is None else min(poll, deadline - now)
                self._wakeup.wait(max(wait, 0.0))
        finally:
            if following:
                store.unfollow(key, self)
        return self._finish()

    def flush(self) -> None:
        """Writes the rest of a blocked write and everything queued, blocking."""
        with self._writing:
            if self._done:
                return
            data = self._left + self._take()
            self._left = b""
            try:
                if data:
                    self._sock.sendall(data)
            except OSError:
                self._end()
                return
            if self._cut_due:
                self._cut()

    def _begin(self, store: Store) -> None:
        """The events before the first change followed; runs under the store's lock."""
        req = self.req
        if req.resource_version in ("", "0") or req.send_initial:
            items, rv = store.snapshot(req.rtype, req.namespace, req.match)
            self._queue.extend(("ADDED", item) for item in items)
            if req.send_initial:
                self._queue.append(encode(req.bookmark(rv, initial_end=True)))
        else:
            changes, _ = store.changes_since(int(req.resource_version), req.rtype.key)
            self._queue.extend((None, change) for change in changes)

    def _offer_bookmark(self, rv: int) -> None:
        self._queue.append(encode(self.req.bookmark(rv)))

    def _finish(self) -> bool:
        """The last events and the closing chunk; a watch with a drop fault is cut instead."""
        self.flush()
        with self._writing:
            if self._done:
                return False
            if self._limit is not None:
                self._cut()
                return False
            self._done = True
            try:
                self._sock.sendall(b"0\r\n\r\n")
            except OSError:
                return False
            return True

    def _take(self) -> bytes:
        """Everything queued as one chunk (b"" when nothing is to be sent); `_writing` held."""
        lines = []
        while self._queue:
            item = self._queue.popleft()
            if isinstance(item, bytes):
                lines.append(item)
                continue
            kind, change = item
            kind = kind or self.req.translate(change)
            if kind is not None:
                lines.append(_line(kind, change.obj_json))
        if self._limit is not None:
            lines = lines[:self._limit - self._sent]
            self._cut_due = self._sent + len(lines) >= self._limit
        self._sent += len(lines)
        if not lines:
            return b""
        data = b"".join(lines)
        return b"%x\r\n%s\r\n" % (len(data), data)

    def _cut(self) -> None:
        """A network drop: no closing chunk, the client sees the connection end."""
        self._done = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._wakeup.set()

    def _end(self) -> None:
        """The client went away."""
        self._done = True
        self._wakeup.set()
