"""client-go's client-side rate limiter: ``flowcontrol.NewTokenBucketRateLimiter(qps, burst)``.

That limiter is golang.org/x/time/rate underneath, and this is the same token bucket:

- the bucket holds at most ``burst`` tokens and starts full, so the first ``burst`` requests go
  out at once; tokens then refill continuously at ``qps`` per second (not once per second);
- ``wait()`` *reserves* a token even when none is there yet (the balance goes negative) and sleeps
  until it is due, so concurrent callers are served in the order they arrived and the long-run rate
  never exceeds ``qps``;
- ``try_accept()`` takes a token only if one is available now and never waits.

client-go's ``rest.Config`` edge cases (``effective_limits``): QPS 0 means ``DefaultQPS`` (5) and
burst 0 means ``DefaultBurst`` (10); a negative QPS means no client-side limiter at all (and then
burst is ignored). A negative burst with a positive QPS makes x/time/rate reject every request;
we refuse it up front instead.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from hami.core.kube.options import DEFAULT_BURST, DEFAULT_QPS


class Clock(Protocol):
    """Monotonic time and sleeping, injectable so tests need no real waiting."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class RateLimitTimeout(Exception):
    """A wait with a deadline would have outlasted it (x/time/rate: "would exceed context deadline")."""


def effective_limits(qps: float, burst: int) -> tuple[float, int] | None:
    """The (qps, burst) client-go would run with, or None for "no limiter" (negative QPS)."""
    if qps == 0:
        qps = DEFAULT_QPS
    if burst == 0:
        burst = DEFAULT_BURST
    if qps < 0:
        return None
    if burst < 0:
        raise ValueError(f"burst must be >= 0 when qps > 0, got {burst}")
    return qps, burst


class TokenBucket:
    """Token bucket with capacity ``burst`` refilled at ``qps`` tokens per second. Thread-safe."""

    def __init__(self, qps: float, burst: int, clock: Clock | None = None) -> None:
        if qps <= 0:
            raise ValueError(f"qps must be > 0, got {qps}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst}")
        self._qps = float(qps)
        self._burst = burst
        self._clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._last = self._clock.monotonic()

    @property
    def qps(self) -> float:
        return self._qps

    @property
    def burst(self) -> int:
        return self._burst

    def _advance(self, now: float) -> None:
        # Caller holds the lock. A clock that steps back (it should not) earns no tokens.
        elapsed = max(0.0, now - self._last)
        self._tokens = min(float(self._burst), self._tokens + elapsed * self._qps)
        self._last = max(self._last, now)

    def tokens(self) -> float:
        """Tokens available now; negative while callers are queued for future tokens."""
        with self._lock:
            self._advance(self._clock.monotonic())
            return self._tokens

    def try_accept(self) -> bool:
        """Take a token if one is available now; never blocks."""
        with self._lock:
            self._advance(self._clock.monotonic())
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False

    def reserve(self, timeout: float | None = None) -> float:
        """Reserve a token and return how long the caller must wait for it (0 if none).

        With ``timeout``, a reservation that would need a longer wait is not made and
        ``RateLimitTimeout`` is raised, leaving the bucket untouched (x/time/rate's behaviour).
        """
        with self._lock:
            self._advance(self._clock.monotonic())
            remaining = self._tokens - 1.0
            delay = 0.0 if remaining >= 0 else -remaining / self._qps
            if timeout is not None and delay > timeout:
                raise RateLimitTimeout(
                    f"rate: Wait(n=1) would exceed context deadline (needs {delay:.3f}s, "
                    f"has {timeout:.3f}s)"
                )
            self._tokens = remaining
            return delay

    def wait(self, timeout: float | None = None) -> float:
        """Block until a token is ours; return the seconds spent waiting."""
        delay = self.reserve(timeout)
        if delay > 0:
            self._clock.sleep(delay)
        return delay
