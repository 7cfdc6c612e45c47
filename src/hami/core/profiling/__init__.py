"""Go-compatible `/debug/pprof/` for our daemons, behind `--profiling`.

The commands of docs/guides/profiling.md work unchanged::

    go tool pprof http://HOST:PORT/debug/pprof/profile?seconds=30   # then: top, list FUNC
    go tool pprof https+insecure://HOST/debug/pprof/heap            # or allocs
    curl 'http://HOST:PORT/debug/pprof/goroutine?debug=2'

`profile` (cpu.py), `heap`/`allocs` (heap.py) and `goroutine` (threads.py) answer gzipped
profile.proto; function names are `module.qualname` and files are absolute paths, so pprof's
`list` shows the Python source where it is installed.

Component-facing API::

    from hami.core.profiling import add_profiling_flag
    add_profiling_flag(parser)                       # --profiling (default off)
    serve_metrics(..., profiling=args.profiling)     # mounts /debug/pprof/

CPU samples are taken only for the request's window. A daemon run with `--profiling` calls
`start_tracing()` at start-up, so `heap` shows allocations made before the request, as Go's does:
`--profiling` is a debugging switch with a steady cost (bench/bench_extender.py --profiling
measures it). Servers that mount pprof without it (tests) trace only for a request's window.
`make_pprof_app()` is what `hami.core.serve` mounts; `mount_pprof(app)` puts it in front of another
WSGI app (the extender's HTTPS listener).
"""

from __future__ import annotations

import argparse

from hami.core.profiling.app import PPROF_PREFIX, is_pprof_path, make_pprof_app, mount_pprof
from hami.core.profiling.heap import start_tracing

__all__ = [
    "PPROF_PREFIX",
    "add_profiling_flag",
    "is_pprof_path",
    "make_pprof_app",
    "mount_pprof",
    "start_tracing",
]


def add_profiling_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profiling",
        action="store_true",
        default=False,
        help="serve /debug/pprof/ (CPU, heap, allocs, goroutine); heap tracing runs from start-up",
    )
