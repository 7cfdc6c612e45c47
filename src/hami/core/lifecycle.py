"""Stopping a daemon within its grace period.

On SIGTERM the kubelet waits ``terminationGracePeriodSeconds`` (30 s by default) before SIGKILL.
A daemon's orderly stop (HTTP servers given ``hami.core.serve.server.GRACE_S`` for requests in
flight, informers, the event queue flushed) usually takes a second, but one of its steps can wait
on a slow API server. ``stop_within`` bounds the whole: every thread the daemons start is a daemon
thread, so once the main thread returns the process exits, whatever is still stopping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from hami.core import klog

log = klog.get_logger(__name__)

STOP_GRACE_S: Final = 20.0  # inside the kubelet's default 30 s, with room for the interpreter's exit


def stop_within(stop: Callable[[], None], what: str, seconds: float = STOP_GRACE_S) -> bool:
    """Run ``stop()``, waiting at most ``seconds``; False (and a warning) if it had not finished."""

    def run() -> None:
        try:
            stop()
        except Exception:  # a failed step must not keep the process from exiting
            log.warning("stopping %s failed", what, exc_info=True)

    thread = threading.Thread(target=run, name=f"stop-{what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        log.warning("%s did not stop within %gs; exiting anyway", what, seconds)
        return False
    return True


def wait_unless_stopped(wait: Callable[[float], bool], stop: threading.Event, seconds: float) -> bool:
    """``wait(timeout)`` (e.g. an informer's ``wait_for_sync``) for at most ``seconds``, in short
    slices, so that a SIGTERM arriving meanwhile (``stop``) is not held up; True once it succeeded."""
    deadline = time.monotonic() + seconds
    while not stop.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if wait(min(remaining, 0.25)):
            return True
    return False


def wait_for_stop(stop: threading.Event) -> None:
    """Block the main thread until ``stop`` is set by a signal handler.

    CPython runs a Python signal handler only in the main thread, once it executes bytecode again. A
    SIGTERM the kernel delivers to another thread (gRPC's, the HTTP server's) does not interrupt a
    plain ``stop.wait()``, which would then sleep through it; waking every second bounds that delay.
    """
    while not stop.wait(1.0):
        pass
