"""Go-compatible `/debug/pprof/` for our daemons, behind `--profiling`.

The commands of docs/guides/profiling.md work unchanged::

    go tool pprof http://HOST:PORT/debug/pprof/profile?seconds=30   # then: top, list FUNC
    go tool pprof https+insecure://HOST/debug/pprof/heap            # or allocs
    curl 'http://HOST:PORT/debug/pprof/goroutine?debug=2'

`profile` (cpu.py), `heap`/`allocs` (heap.py) and `goroutine` (threads.py) answer gzipped
profile.proto; function names are `module.qualname` and files are absolute paths, so pprof's
`list` shows the Python source where it is installed.

Component-facing API::

    from hami.core.profiling import add_heap_from_start_flag, start_tracing
    add_heap_from_start_flag(parser)                 # --profiling.heap-from-start (default off)
    if args.profiling_heap_from_start: start_tracing()
    serve_metrics(..., profiling=args.profiling)     # mounts /debug/pprof/

`--profiling` costs nothing until a profile is asked for: CPU samples are taken only for the
request's window, and `heap`/`allocs` trace allocations only for theirs (heap.py). Go's heap
profile samples one allocation per 512 KiB from start-up at next to no cost; Python has no
sampling allocator, and tracing every allocation multiplies the extender's CPU per pod, so
the view "everything alive since start-up" is the explicit opt-in `--profiling.heap-from-start`.
`make_pprof_app()` is what `hami.core.serve` mounts; `mount_pprof(app)` puts it in front of another
WSGI app (the extender's HTTPS listener).
"""

from __future__ import annotations

import argparse

from hami.core.profiling.app import PPROF_PREFIX, is_pprof_path, make_pprof_app, mount_pprof
from hami.core.profiling.heap import DEFAULT_WINDOW_S, start_tracing

__all__ = [
    "PPROF_PREFIX",
    "PROFILING_HELP",
    "add_heap_from_start_flag",
    "add_profiling_flag",
    "check_profiling_flags",
    "is_pprof_path",
    "make_pprof_app",
    "mount_pprof",
    "start_tracing",
]


PROFILING_HELP = ("serve /debug/pprof/ (profile, heap, allocs, goroutine); nothing is sampled or traced "
                  "until a profile is asked for")
HEAP_FROM_START_HELP = (
    "with --profiling: trace every Python allocation from start-up (tracemalloc, 32 frames), so "
    "/debug/pprof/heap shows all live memory by the stack that allocated it, as Go's does. Costs "
    "about 11x the CPU of allocation-heavy work for the process's life (the extender's CPU per pod); "
    "without it heap and allocs trace only their request's window (?seconds=N, default "
    f"{DEFAULT_WINDOW_S} s)"
)


def add_profiling_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profiling",
        action="store_true",
        default=False,
        help=PROFILING_HELP,
    )


def add_heap_from_start_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profiling.heap-from-start",
        dest="profiling_heap_from_start",
        action="store_true",
        default=False,
        help=HEAP_FROM_START_HELP,
    )


def check_profiling_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A usage error for tracing that nothing could read (the flag without --profiling)."""
    if args.profiling_heap_from_start and not args.profiling:
        parser.error("--profiling.heap-from-start needs --profiling: "
                     "only /debug/pprof/heap reads what it traces")
