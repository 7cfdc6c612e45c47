"""Heap profiles from tracemalloc: every live Python allocation, by allocating stack.

Sample types, as Go's heap profile: `alloc_objects/count`, `alloc_space/bytes`,
`inuse_objects/count`, `inuse_space/bytes`. tracemalloc keeps only blocks that are still alive, so
a plain snapshot has alloc_* equal to inuse_* (`heap` shows inuse_space, `allocs` alloc_space by
default). With `?seconds=N` the answer is the growth over N seconds: blocks allocated during the
window and still alive at its end (negative growth is dropped), as Go's delta profiles; for
growth between two arbitrary points use `go tool pprof -base old.pb.gz new.pb.gz`.

tracemalloc is started by `start_profiling()` (i.e. `--profiling`): it costs memory per traced
block and slows allocation, which is why profiling is opt-in.
"""

from __future__ import annotations

import os
import time
import tracemalloc
from collections.abc import Callable

from hami.core.profiling.pprof_proto import ProfileBuilder
from hami.core.profiling.symbols import LineResolver

TRACE_FRAMES = 32  # frames kept per allocation (Go keeps 32 too)
SAMPLE_TYPES = [("alloc_objects", "count"), ("alloc_space", "bytes"),
                ("inuse_objects", "count"), ("inuse_space", "bytes")]

_resolver = LineResolver()


def start_tracing() -> None:
    if not tracemalloc.is_tracing():
        tracemalloc.start(TRACE_FRAMES)


# The profiler's own caches (parsed sources for naming frames) are not the daemon's memory.
_OWN_FILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "*")


def _snapshot() -> tracemalloc.Snapshot:
    snap = tracemalloc.take_snapshot()
    return snap.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__),
                               tracemalloc.Filter(False, _OWN_FILES, all_frames=True)])


def heap_profile(default_sample_type: str, seconds: float = 0,
                 wait: Callable[[float], None] = time.sleep) -> ProfileBuilder:
    """A heap profile now, or the growth over `seconds` if positive. Needs tracing started."""
    if not tracemalloc.is_tracing():
        raise RuntimeError("tracemalloc is not tracing; start the daemon with --profiling")
    builder = ProfileBuilder(SAMPLE_TYPES, ("space", "bytes"), 1, default_sample_type)
    builder.time_nanos = time.time_ns()
    if seconds > 0:
        before = _snapshot()
        wait(seconds)
        stats = [(d.traceback, max(d.count_diff, 0), d.size_diff)
                 for d in _snapshot().compare_to(before, "traceback") if d.size_diff > 0]
        builder.duration_nanos = int(seconds * 1e9)
    else:
        stats = [(s.traceback, s.count, s.size) for s in _snapshot().statistics("traceback")]
    for traceback, count, size in stats:
        # tracemalloc orders frames oldest first; pprof wants the leaf first.
        stack = [_resolver.frame(f.filename, f.lineno) for f in reversed(traceback)]
        builder.add(stack, [count, size, count, size])
    return builder
