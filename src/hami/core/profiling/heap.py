"""Heap profiles from tracemalloc: every live Python allocation, by allocating stack.

Sample types, as Go's heap profile: `alloc_objects/count`, `alloc_space/bytes`,
`inuse_objects/count`, `inuse_space/bytes`. tracemalloc keeps only blocks that are still alive, so
alloc_* equals inuse_* (`heap` shows inuse_space, `allocs` alloc_space by default).

Tracing starts when profiling is enabled (the daemons call `start_tracing` at start-up with
`--profiling`), as Go's heap profile records from the start: a plain request is then a snapshot of
every block still alive, whenever it was allocated, so a cache that is never freed shows up under
the code that filled it. `?seconds=N` answers the growth over N seconds instead (negative growth
dropped); for growth between two arbitrary points use `go tool pprof -base old.pb.gz new.pb.gz`.
Python has no sampling allocator, so tracing is the price of `--profiling` (see
bench/bench_extender.py --profiling). Where nothing traces (pprof mounted in a test process), a
request traces for its own window (default `DEFAULT_WINDOW_S`).

The snapshot is taken here; grouping, naming and encoding run in a child process
(`heap_encode`), because every allocation made while tracemalloc traces costs a stack capture,
which made building the profile in-process 10-20x slower.
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


class HeapProfileBusy(RuntimeError):
    """Another heap/allocs window is open; tracing windows do not nest."""


def heap_profile(default_sample_type: str, seconds: float = 0,
                 wait: Callable[[float], None] = time.sleep) -> bytes:
    """Gzipped profile.proto of the allocations of a traced window (see the module docstring)."""
    if not _window.acquire(blocking=False):
        raise HeapProfileBusy("a heap or allocs profile is already being taken")
    try:
        return _profile(default_sample_type, seconds, wait)
    finally:
        _window.release()


def _profile(default_sample_type: str, seconds: float, wait: Callable[[float], None]) -> bytes:
    time_nanos = time.time_ns()
    started_here = not tracemalloc.is_tracing()
    window = (seconds or DEFAULT_WINDOW_S) if started_here else seconds
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
    return done.stdout
