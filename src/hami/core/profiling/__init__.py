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

Nothing runs until a profile is asked for: CPU samples and tracemalloc (heap/allocs) are on only
for the request's window, so `--profiling` costs nothing while idle. `make_pprof_app()` is what
`hami.core.serve` mounts; use it directly only to mount pprof on another WSGI server.
"""

from __future__ import annotations

import argparse

from hami.core.profiling.app import PPROF_PREFIX, make_pprof_app

__all__ = ["PPROF_PREFIX", "add_profiling_flag", "make_pprof_app"]


def add_profiling_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profiling", action="store_true", default=False,
        help="serve /debug/pprof/ (CPU, heap, allocs, goroutine); tracing runs only while a profile is taken",
    )

