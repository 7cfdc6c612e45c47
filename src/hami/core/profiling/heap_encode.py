"""Child-process half of heap.py: snapshot files -> gzipped profile.proto on stdout.

Usage: python -m hami.core.profiling.heap_encode DIR DEFAULT_SAMPLE_TYPE TIME_NANOS DURATION_NANOS
DIR holds `after` (and `before` for a delta) from `Snapshot.dump` and `modules.json`
(file -> module name, from the profiled process).
"""

from __future__ import annotations

import json
import os
import sys
import tracemalloc

from hami.core.profiling.pprof_proto import ProfileBuilder
from hami.core.profiling.symbols import LineResolver

SAMPLE_TYPES = [("alloc_objects", "count"), ("alloc_space", "bytes"),
                ("inuse_objects", "count"), ("inuse_space", "bytes")]
# The profiler's own work in the profiled process (taking the snapshot) is not the daemon's memory.
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def encode(directory: str, default_sample_type: str, time_nanos: int, duration_nanos: int) -> bytes:
    with open(os.path.join(directory, "modules.json"), encoding="utf-8") as f:
        resolver = LineResolver(json.load(f))
    after = tracemalloc.Snapshot.load(os.path.join(directory, "after"))
    before_path = os.path.join(directory, "before")
    if os.path.exists(before_path):
        diffs = after.compare_to(tracemalloc.Snapshot.load(before_path), "traceback")
        stats = [(d.traceback, max(d.count_diff, 0), d.size_diff) for d in diffs if d.size_diff > 0]
    else:
        stats = [(s.traceback, s.count, s.size) for s in after.statistics("traceback")]
    builder = ProfileBuilder(SAMPLE_TYPES, ("space", "bytes"), 1, default_sample_type)
    builder.time_nanos, builder.duration_nanos = time_nanos, duration_nanos
    for traceback, count, size in stats:
        frames = [(f.filename, f.lineno) for f in traceback]
        if any(name.startswith(_OWN_DIR) or name == tracemalloc.__file__ for name, _ in frames):
            continue
        # tracemalloc orders frames oldest first; pprof wants the leaf first.
        builder.add([resolver.frame(name, line) for name, line in reversed(frames)],
                    [count, size, count, size])
    return builder.encode_gzip()


def main() -> None:
    directory, default, time_nanos, duration_nanos = sys.argv[1:5]
    sys.stdout.buffer.write(encode(directory, default, int(time_nanos), int(duration_nanos)))


if __name__ == "__main__":
    main()
