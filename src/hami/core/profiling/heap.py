"""Heap profiles from tracemalloc: live Python allocations, by allocating stack.

Sample types, as Go's heap profile: `alloc_objects/count`, `alloc_space/bytes`,
`inuse_objects/count`, `inuse_space/bytes`. tracemalloc keeps only blocks that are still alive, so
alloc_* equals inuse_* (`heap` shows inuse_space, `allocs` alloc_space by default).

Go samples one allocation per 512 KiB from start-up, which costs next to nothing, so its heap
profile is on whenever pprof is mounted. Python has no sampling allocator: tracemalloc records the
stack of every allocation, which multiplies the extender's CPU per pod. So by default
nothing traces until a heap or allocs request comes: the request traces for its window
(`?seconds=N`, default `DEFAULT_WINDOW_S`) and answers the blocks allocated in it and still alive
at its end. A daemon run with `--profiling.heap-from-start` calls `start_tracing` at start-up, as
Go records from the start: a plain request is then a snapshot of every block still alive,
whenever it was allocated (a cache that is never freed shows under the code that filled it), and
`?seconds=N` the growth over N seconds (negative growth dropped). For growth between two arbitrary
points use `go tool pprof -base old.pb.gz new.pb.gz`. Each answer says which it is in its
`X-Heap-Window` header and in the profile's duration.

The snapshot is taken here; grouping, naming and encoding run in a child process
(`heap_encode`), because every allocation made while tracemalloc traces costs a stack capture,
which made building the profile in-process many times slower (docs/design/extender-performance.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable

import hami

TRACE_FRAMES = 32  # frames kept per allocation (Go keeps 32 too)
ENCODE_TIMEOUT_S = 120
DEFAULT_WINDOW_S = 10

_window = threading.Lock()


def start_tracing() -> None:
    """Trace every allocation from now on (idempotent; a PYTHONTRACEMALLOC start is kept)."""
    if not tracemalloc.is_tracing():
        tracemalloc.start(TRACE_FRAMES)


def tracing_state() -> str:
    """What tracemalloc is doing now, for the pprof index: the price an operator pays."""
    if _window.locked():
        return "tracing for a heap or allocs request's window"
    if tracemalloc.is_tracing():
        return "tracing every allocation since start-up (--profiling.heap-from-start)"
    return "not tracing (heap and allocs trace only for their request's window)"


class HeapProfileBusy(RuntimeError):
    """Another heap/allocs window is open; tracing windows do not nest."""


def heap_profile(default_sample_type: str, seconds: float = 0,
                 wait: Callable[[float], None] = time.sleep) -> tuple[bytes, str]:
    """Gzipped profile.proto of the allocations of a traced window (see the module docstring),
    and a line saying what the window was."""
    if not _window.acquire(blocking=False):
        raise HeapProfileBusy("a heap or allocs profile is already being taken")
    try:
        return _profile(default_sample_type, seconds, wait)
    finally:
        _window.release()


def _profile(default_sample_type: str, seconds: float,
             wait: Callable[[float], None]) -> tuple[bytes, str]:
    time_nanos = time.time_ns()
    started_here = not tracemalloc.is_tracing()
    window = (seconds or DEFAULT_WINDOW_S) if started_here else seconds
    if started_here:
        what = (f"{window:g}s: allocations traced during the window and still alive at its end "
                f"(--profiling.heap-from-start traces from start-up)")
    elif window:
        what = f"{window:g}s: growth over the window (traced since start-up)"
    else:
        what = "since start-up: every block still alive"
    with tempfile.TemporaryDirectory(prefix="hami-heap-") as tmp:
        if started_here:
            tracemalloc.start(TRACE_FRAMES)
        try:
            if window > 0 and not started_here:
                tracemalloc.take_snapshot().dump(os.path.join(tmp, "before"))
            wait(window)
            tracemalloc.take_snapshot().dump(os.path.join(tmp, "after"))
        finally:
            if started_here:
                tracemalloc.stop()
        modules = {f: name for name, m in list(sys.modules.items())
                   if isinstance(f := getattr(m, "__file__", None), str)}
        with open(os.path.join(tmp, "modules.json"), "w", encoding="utf-8") as out:
            json.dump(modules, out)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONTRACEMALLOC"}
        src_root = os.path.dirname(os.path.dirname(os.path.abspath(hami.__file__)))
        env["PYTHONPATH"] = os.pathsep.join([src_root, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        done = subprocess.run(
            [sys.executable, "-m", "hami.core.profiling.heap_encode", tmp, default_sample_type,
             str(time_nanos), str(int(window * 1e9))],
            capture_output=True, env=env, timeout=ENCODE_TIMEOUT_S, check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"heap profile encoding failed: {done.stderr.decode(errors='replace')[-500:]}")
    return done.stdout, what
