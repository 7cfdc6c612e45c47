"""CPU profile: sample every thread's Python stack at ~100 Hz, weighted by the CPU it used.

At each tick (every 10 ms) the sampler reads each thread's CPU clock
(`pthread_getcpuclockid`) and its current Python stack (`sys._current_frames`). The CPU time a
thread consumed since the previous tick is charged to the stack seen now. So, as in Go's CPU
profile, idle threads (blocked in a lock, socket or sleep) contribute nothing, and the total is
the process' CPU time over the window. Caveats: a stack is only seen at ticks, so time is
attributed to where the thread was at the end of each 10 ms interval; CPU spent in native code that
releases the GIL is charged to the Python frame that called it; the sampler's own thread is
excluded.

Sample types: `samples/count` (ticks at which the thread had used CPU) and `cpu/nanoseconds`.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

from hami.core.profiling.pprof_proto import ProfileBuilder
from hami.core.profiling.symbols import stack_of

SAMPLE_HZ = 100
PERIOD_NS = 1_000_000_000 // SAMPLE_HZ


class ProfilerBusy(RuntimeError):
    """Another CPU profile is being taken (one at a time, as in Go)."""


_busy = threading.Lock()


def _thread_cpu_ns(ident: int) -> int | None:
    try:
        return time.clock_gettime_ns(time.pthread_getcpuclockid(ident))
    except (OSError, OverflowError):
        return None  # the thread exited between listing and reading


def cpu_profile(seconds: float, stop: Callable[[], bool] = lambda: False) -> ProfileBuilder:
    """Sample for `seconds` (or until `stop()` is true) and return the profile."""
    if not _busy.acquire(blocking=False):
        raise ProfilerBusy("cpu profiling already in use")
    try:
        return _sample(seconds, stop)
    finally:
        _busy.release()


def _sample(seconds: float, stop: Callable[[], bool]) -> ProfileBuilder:
    builder = ProfileBuilder([("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"),
                             PERIOD_NS)
    me = threading.get_ident()
    builder.time_nanos = time.time_ns()
    start = time.monotonic_ns()
    deadline = start + int(seconds * 1e9)
    last: dict[int, int] = {}
    for ident in sys._current_frames():
        cpu = _thread_cpu_ns(ident)
        if cpu is not None:
            last[ident] = cpu
    next_tick = start
    while not stop():
        next_tick += PERIOD_NS
        now = time.monotonic_ns()
        if now >= deadline:
            break
        time.sleep(max(0, min(next_tick, deadline) - now) / 1e9)
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            cpu = _thread_cpu_ns(ident)
            if cpu is None:
                continue
            used = cpu - last.get(ident, cpu)
            last[ident] = cpu
            if used > 0:
                builder.add(stack_of(frame), [1, used])
    builder.duration_nanos = time.monotonic_ns() - start
    return builder
