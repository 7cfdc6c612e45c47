"""A fake monotonic clock for tests of rate limits, backoffs and deadlines (a clock is not a peer:
faking it is fine)."""

from __future__ import annotations

import threading


class FakeClock:
    """A monotonic clock that only moves when told to, or when someone sleeps on it."""

    def __init__(self, advance_on_sleep: bool = False) -> None:
        self.advance_on_sleep = advance_on_sleep
        self.now = 1000.0
        self.slept: list[float] = []
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.slept.append(seconds)
            if self.advance_on_sleep:
                self.now += seconds

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds
