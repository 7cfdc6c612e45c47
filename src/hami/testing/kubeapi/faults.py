"""Injected faults and the request log: what tests use to provoke and to observe the client."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Fault:
    """One rule. Matches requests by method and a regex searched in the path (query excluded).

    - `status`: answer with a Kubernetes Status of that code (500, 409, 429, 503, ...) instead of
      serving; 429 and 503 carry `Retry-After: retry_after`.
    - `delay`: sleep that long first (then fail with `status` or serve normally), e.g. longer than
      the client's timeout to provoke a client-side timeout. The server still applies a delayed
      write afterwards, as a slow real server would.
    - `drop_watch`: for a watch, send `after_events` events, then cut the connection without the
      closing chunk (a network drop, not a clean end).
    - `times`: how many requests it hits before it is used up; None means forever.
    """

    method: str | None = None
    path: str | None = None
    status: int | None = None
    delay: float = 0.0
    times: int | None = 1
    drop_watch: bool = False
    after_events: int = 0
    message: str = ""
    retry_after: int = 1
    hits: int = 0
    _pattern: re.Pattern[str] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._pattern = re.compile(self.path) if self.path is not None else None

    def matches(self, method: str, path: str, watch: bool) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.method is not None and self.method.upper() != method:
            return False
        if self.drop_watch and not watch:
            return False
        return self._pattern is None or self._pattern.search(path) is not None

    @property
    def used_up(self) -> bool:
        return self.times is not None and self.hits >= self.times


class Faults:
    """`server.faults`: `add(...)` a rule, `clear()` them all; rules are tried in order added."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Fault] = []

    def add(
        self,
        *,
        method: str | None = None,
        path: str | None = None,
        status: int | None = None,
        delay: float = 0.0,
        times: int | None = 1,
        drop_watch: bool = False,
        after_events: int = 0,
        message: str = "",
        retry_after: int = 1,
    ) -> Fault:
        if status is None and delay <= 0 and not drop_watch:
            raise ValueError("a fault needs a status, a delay or drop_watch")
        fault = Fault(method, path, status, delay, times, drop_watch, after_events, message, retry_after)
        with self._lock:
            self._rules.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def take(self, method: str, path: str, watch: bool) -> Fault | None:
        """The first live rule for this request, counted as hit."""
        with self._lock:
            for fault in self._rules:
                if fault.matches(method, path, watch):
                    fault.hits += 1
                    return fault
            return None

    @property
    def pending(self) -> list[Fault]:
        """Rules not yet used up."""
        with self._lock:
            return [f for f in self._rules if not f.used_up]


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    status: int
    watch: bool
    at: float = field(default_factory=time.monotonic)  # when it was answered (time.monotonic)


class RequestLog:
    """`server.requests`: every request served (discovery included), in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._records: list[Request] = []

    def add(self, record: Request) -> None:
        with self._lock:
            self._records.append(record)
            self._lock.notify_all()

    def wait_for(self, method: str | None = None, path: str | None = None, count: int = 1,
                 timeout: float = 10.0, **query: Any) -> None:
        """Block until `count(method, path, **query) >= count`; TimeoutError after `timeout` seconds.

        E.g. `wait_for(path=r"/api/v1/pods$", watch="true")`: the component's informer is watching.
        """
        with self._lock:
            if not self._lock.wait_for(lambda: self._count(method, path, query) >= count, timeout):
                raise TimeoutError(f"{self._count(method, path, query)} of {count} requests "
                                   f"{method or '*'} {path or '*'} {query or ''} after {timeout}s")

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    @property
    def records(self) -> list[Request]:
        with self._lock:
            return list(self._records)

    def count(self, method: str | None = None, path: str | None = None, **query: Any) -> int:
        """Requests with this method (any if None), a path matching the regex `path` (searched),
        and these query parameters (e.g. `watch="true"`)."""
        with self._lock:
            return self._count(method, path, query)

    def _count(self, method: str | None, path: str | None, query: dict[str, Any]) -> int:
        pattern = re.compile(path) if path is not None else None
        return sum(
            1 for r in self._records
            if (method is None or r.method == method.upper())
            and (pattern is None or pattern.search(r.path))
            and all(r.query.get(k) == str(v) for k, v in query.items())
        )

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)
