"""The `/debug/pprof/` WSGI app (paths and answers as Go's net/http/pprof)."""

from __future__ import annotations

import html
import sys
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from hami.core import klog
from hami.core.profiling.cpu import ProfilerBusy, cpu_profile
from hami.core.profiling.heap import DEFAULT_WINDOW_S, heap_profile, tracing_state
from hami.core.profiling.threads import goroutine_profile, goroutine_text

log = klog.get_logger(__name__)

PPROF_PREFIX = "/debug/pprof/"
DEFAULT_SECONDS = 30
MAX_SECONDS = 3600

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

PROFILES = {
    "allocs": f"Python allocations by stack, traced for ?seconds=N (default {DEFAULT_WINDOW_S}) "
              "(tracemalloc)",
    "cmdline": "The command line of the running program",
    "goroutine": "Stack traces of all threads (?debug=1 grouped text, ?debug=2 every thread)",
    "heap": f"Live Python memory allocated during ?seconds=N (default {DEFAULT_WINDOW_S}), by stack "
            "(tracemalloc; everything alive with --profiling.heap-from-start)",
    "profile": "CPU profile; ?seconds=N (default 30), then `go tool pprof` it",
}


class BadRequest(ValueError):
    pass


def _int_param(query: dict[str, list[str]], name: str, default: int, maximum: int) -> int:
    values = query.get(name)
    if not values or values[0] == "":
        return default
    try:
        value = int(values[0])
    except ValueError:
        raise BadRequest(f"{name}={values[0]!r} is not an integer") from None
    if not 0 <= value <= maximum:
        raise BadRequest(f"{name}={value} is out of range 0..{maximum}")
    return value


def _proto(start_response: StartResponse, name: str, body: bytes,
           extra: tuple[tuple[str, str], ...] = ()) -> list[bytes]:
    start_response("200 OK", [
        ("Content-Type", "application/octet-stream"),
        ("Content-Disposition", f'attachment; filename="{name}"'),
        ("X-Content-Type-Options", "nosniff"),
        ("Content-Length", str(len(body))),
        *extra,
    ])
    return [body]


def _text(start_response: StartResponse, status: str, body: str, ctype: str = "text/plain") -> list[bytes]:
    data = body.encode()
    start_response(status, [
        ("Content-Type", f"{ctype}; charset=utf-8"),
        ("X-Content-Type-Options", "nosniff"),
        ("Content-Length", str(len(data))),
    ])
    return [data]


def _index() -> str:
    rows = "\n".join(
        f'<tr><td><a href="{name}{"?debug=1" if name == "goroutine" else ""}">{name}</a></td>'
        f"<td>{html.escape(doc)}</td></tr>"
        for name, doc in PROFILES.items()
    )
    return (f"<html><head><title>/debug/pprof/</title></head><body>/debug/pprof/<br><br>"
            f"<table>{rows}</table><br><a href=\"goroutine?debug=2\">full goroutine stack dump</a>"
            f"<br><br>heap: {html.escape(tracing_state())}</body></html>\n")


def is_pprof_path(path: str) -> bool:
    return path == PPROF_PREFIX.rstrip("/") or path.startswith(PPROF_PREFIX)


def mount_pprof(app: WSGIApp) -> WSGIApp:
    """``app`` with /debug/pprof/* in front of it, behind whatever guards the server that runs it
    (the extender mounts it on its mutual-TLS listener, where the profiling guide looks)."""
    pprof = make_pprof_app()

    def mounted(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if is_pprof_path(environ.get("PATH_INFO", "")):
            return pprof(environ, start_response)
        return app(environ, start_response)

    return mounted


def make_pprof_app() -> WSGIApp:
    def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        name = environ.get("PATH_INFO", "").removeprefix(PPROF_PREFIX.rstrip("/")).strip("/")
        query = parse_qs(environ.get("QUERY_STRING", ""))
        try:
            if name == "":
                return _text(start_response, "200 OK", _index(), "text/html")
            if name == "profile":
                seconds = _int_param(query, "seconds", DEFAULT_SECONDS, MAX_SECONDS) or DEFAULT_SECONDS
                return _proto(start_response, "profile", cpu_profile(seconds).encode_gzip())
            if name in ("heap", "allocs"):
                seconds = _int_param(query, "seconds", 0, MAX_SECONDS)
                default = "inuse_space" if name == "heap" else "alloc_space"
                body, window = heap_profile(default, seconds)
                return _proto(start_response, name, body, (("X-Heap-Window", window),))
            if name == "goroutine":
                debug = _int_param(query, "debug", 0, 2)
                if debug:
                    return _text(start_response, "200 OK", goroutine_text(debug))
                return _proto(start_response, "goroutine", goroutine_profile().encode_gzip())
            if name == "cmdline":
                return _text(start_response, "200 OK", "\x00".join(sys.argv))
        except BadRequest as e:
            return _text(start_response, "400 Bad Request", f"{e}\n")
        except ProfilerBusy as e:
            return _text(start_response, "500 Internal Server Error",
                         f"Could not enable CPU profiling: {e}\n")
        except RuntimeError as e:
            log.warning("pprof %s failed: %s", name, e)
            return _text(start_response, "500 Internal Server Error", f"{e}\n")
        return _text(start_response, "404 Not Found", "Unknown profile\n")

    return app
