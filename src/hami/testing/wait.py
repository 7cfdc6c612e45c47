"""Polling with a deadline: the one way tests, benchmarks and the demo wait for something to happen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """The condition did not hold in time. An AssertionError, so that in a test it reads as a failure
    (not an error) with the message naming what was awaited."""


def wait_until(
    check: Callable[[], T | None],
    timeout: float = 30.0,
    what: str = "condition",
    *,
    alive: Callable[[], None] | None = None,
    interval: float = 0.02,
) -> T:
    """Polls ``check`` every ``interval`` s until it returns something truthy, and returns that.

    ``alive`` runs before each check and raises when waiting is pointless (a child process died).
    """
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None:
            alive()
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
