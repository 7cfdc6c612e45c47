"""CPU profile: sample the Python stacks of the threads that are running, ~100 times a second.

A Python sampler holds the GIL while it looks, so every other thread is stopped somewhere: the
one it took the GIL from in the middle of its work, the others in a blocking call (lock, socket,
sleep). Charging each thread's CPU since the last tick to the stack seen at the tick (as a first
version did) therefore put the CPU of short bursts in the call the thread then blocked in: a busy
server's profile read `threading.Condition.wait` and `socket.readinto`.

So each tick tells running threads from blocked ones by their CPU clocks
(`pthread_getcpuclockid`): the sampler hands the GIL over for a moment (the switch interval
lowered to `HANDOFF_S` for that moment only), reads the stacks, and hands it over again. A thread
that moved its clock the most in both windows (by at least `MIN_RUN_NS`), or ran native code
without the GIL through most of them, was running right before and right after the stacks were
read, so its stack is where it spends CPU. It is charged all the CPU it used since it was last
charged. Threads that only woke up, or ran a burst and blocked, wait for a later tick.

Caveats: a tick at which no thread is running adds nothing, so a mostly idle process gives few
samples; CPU spent in native code that releases the GIL is charged to the Python frame that called
it; CPU a thread used after it was last seen running is not in the profile; under heavy contention
some CPU of threads waking from a blocking call is still charged to that call; the sampler's own
thread is excluded.

Sample types: `samples/count` (ticks at which the thread was seen running) and `cpu/nanoseconds`.
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
HANDOFF_S = 50e-6
MIN_RUN_NS = 30_000


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


def _clocks(me: int) -> dict[int, int]:
    clocks: dict[int, int] = {}
    for ident in sys._current_frames():
        if ident != me and (cpu := _thread_cpu_ns(ident)) is not None:
            clocks[ident] = cpu
    return clocks


def _hand_off(me: int, switch_interval: float) -> tuple[dict[int, int], set[int]]:
    """Let a thread waiting for the GIL have it for a moment: (CPU clocks after, who ran)."""
    before = _clocks(me)
    opened = time.monotonic_ns()
    sys.setswitchinterval(HANDOFF_S)
    try:
        time.sleep(HANDOFF_S)
    finally:
        sys.setswitchinterval(switch_interval)
    # The thread that held the GIL moved its clock the most; others moved theirs only waking up
    # (to wait for the GIL, or from a blocking call), unless they ran native code without the GIL
    # for most of the window.
    window = time.monotonic_ns() - opened
    after = _clocks(me)
    moved = {i: c - before[i] for i, c in after.items() if i in before}
    top = max(moved.values(), default=0)
    return after, {i for i, m in moved.items()
                   if m >= MIN_RUN_NS and (m == top or 2 * m >= window)}


def _sample(seconds: float, stop: Callable[[], bool]) -> ProfileBuilder:
    builder = ProfileBuilder([("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"),
                             PERIOD_NS)
    me = threading.get_ident()
    builder.time_nanos = time.time_ns()
    start = time.monotonic_ns()
    deadline = start + int(seconds * 1e9)
    charged = _clocks(me)  # CPU clock of each thread up to which its CPU has been charged
    switch_interval = sys.getswitchinterval()
    next_tick = start
    while not stop():
        next_tick += PERIOD_NS
        now = time.monotonic_ns()
        if now >= deadline:
            break
        time.sleep(max(0, min(next_tick, deadline) - now) / 1e9)
        _, ran_before = _hand_off(me, switch_interval)
        frames = sys._current_frames()
        clocks, ran_after = _hand_off(me, switch_interval)
        for ident in ran_before & ran_after:
            if (frame := frames.get(ident)) is not None:
                cpu, prior = clocks[ident], charged.get(ident, 0)  # 0: started during the profile
                # An ident reused by a new thread shows a clock below the old one's.
                builder.add(stack_of(frame), [1, cpu - prior if cpu >= prior else cpu])
                charged[ident] = cpu
    builder.duration_nanos = time.monotonic_ns() - start
    return builder
