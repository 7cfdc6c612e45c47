"""The metrics/health WSGI app every daemon serves, and `serve_metrics` that starts it."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app

from hami.core import klog
from hami.core.profiling import PPROF_PREFIX, make_pprof_app, start_profiling
from hami.core.serve.server import Environ, Server, StartResponse, WSGIApp, serve_wsgi
from hami.core.serve.webconfig import WebConfig

log = klog.get_logger(__name__)

ReadyCheck = Callable[[], bool | tuple[bool, str]]

_TEXT = [("Content-Type", "text/plain; charset=utf-8")]


def _always_ready() -> bool:
    return True


def readiness(ready: ReadyCheck) -> tuple[bool, str]:
    """Evaluate a readiness check; an exception counts as not ready, with its text as reason."""
    try:
        result = ready()
    except Exception as e:  # a broken check must answer 503, not crash the probe
        log.error("readiness check raised: %s", e)
        return False, f"readiness check failed: {e}"
    if isinstance(result, tuple):
        ok, reason = result
        return bool(ok), reason
    return bool(result), "" if result else "not ready"


def make_app(
    registry: CollectorRegistry = REGISTRY,
    ready: ReadyCheck = _always_ready,
    profiling: bool = False,
    extra_app: WSGIApp | None = None,
) -> WSGIApp:
    """/metrics, /healthz, /readyz, /debug/pprof/* (if `profiling`); anything else -> `extra_app`."""
    metrics = make_wsgi_app(registry)
    pprof = make_pprof_app() if profiling else None

    def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            start_response("200 OK", _TEXT)
            return [b"ok\n"]
        if path == "/readyz":
            ok, reason = readiness(ready)
            start_response("200 OK" if ok else "503 Service Unavailable", _TEXT)
            return [b"ok\n" if ok else f"not ready: {reason}\n".encode()]
        if pprof is not None and (path == PPROF_PREFIX.rstrip("/") or path.startswith(PPROF_PREFIX)):
            return pprof(environ, start_response)
        if extra_app is not None:
            return extra_app(environ, start_response)
        start_response("404 Not Found", _TEXT)
        return [b"404 page not found\n"]

    return app


def serve_metrics(
    bind: str = ":9394",
    registry: CollectorRegistry = REGISTRY,
    *,
    ready: ReadyCheck = _always_ready,
    web_config_file: str | None = None,
    profiling: bool = False,
    extra_app: WSGIApp | None = None,
    web_config: WebConfig | None = None,
    name: str = "hami",
) -> Server:
    """Start the daemon's HTTP server (see the package docstring)."""
    if profiling:
        start_profiling()
    app = make_app(registry, ready, profiling, extra_app)
    return serve_wsgi(bind, app, web_config=web_config, web_config_file=web_config_file, name=name)
