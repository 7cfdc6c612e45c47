"""Heap profiles from tracemalloc: every live Python allocation, by allocating stack.

Sample types, as Go's heap profile: `alloc_objects/count`, `alloc_space/bytes`,
`inuse_objects/count`, `inuse_space/bytes`. tracemalloc keeps only blocks that are still alive, so
a plain snapshot has alloc_* equal to inuse_* (`heap` shows inuse_space, `allocs` alloc_space by
default). With `?seconds=N` the answer is the growth over N seconds: blocks allocated during the
window and still alive at its end (negative growth is dropped), as Go's delta profiles; for
growth between two arbitrary points use `go tool pprof -base old.pb.gz new.pb.gz`.

The snapshot is taken here; grouping, naming and encoding run in a child process
(`heap_encode`), because every allocation made while tracemalloc traces costs a 32-frame stack
capture, which made building the profile in-process 10-20x slower.

tracemalloc is started by `start_profiling()` (i.e. `--profiling`): it costs memory per traced
block and slows allocation, which is why profiling is opt-in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable

import hami

TRACE_FRAMES = 32  # frames kept per allocation (Go keeps 32 too)
ENCODE_TIMEOUT_S = 120


def start_tracing() -> None:
    if not tracemalloc.is_tracing():
        tracemalloc.start(TRACE_FRAMES)


def heap_profile(default_sample_type: str, seconds: float = 0,
                 wait: Callable[[float], None] = time.sleep) -> bytes:
    """Gzipped profile.proto of live allocations, or of their growth over `seconds` if positive."""
    if not tracemalloc.is_tracing():
        raise RuntimeError("tracemalloc is not tracing; start the daemon with --profiling")
    time_nanos = time.time_ns()
    with tempfile.TemporaryDirectory(prefix="hami-heap-") as tmp:
        if seconds > 0:
            tracemalloc.take_snapshot().dump(os.path.join(tmp, "before"))
            wait(seconds)
        tracemalloc.take_snapshot().dump(os.path.join(tmp, "after"))
        modules = {f: name for name, m in list(sys.modules.items())
                   if isinstance(f := getattr(m, "__file__", None), str)}
        with open(os.path.join(tmp, "modules.json"), "w", encoding="utf-8") as out:
            json.dump(modules, out)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONTRACEMALLOC"}
        src_root = os.path.dirname(os.path.dirname(os.path.abspath(hami.__file__)))
        env["PYTHONPATH"] = os.pathsep.join([src_root, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        done = subprocess.run(
            [sys.executable, "-m", "hami.core.profiling.heap_encode", tmp, default_sample_type,
             str(time_nanos), str(int(seconds * 1e9))],
            capture_output=True, env=env, timeout=ENCODE_TIMEOUT_S, check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"heap profile encoding failed: {done.stderr.decode(errors='replace')[-500:]}")
    return done.stdout
