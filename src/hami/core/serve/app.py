"""The metrics/health WSGI app every daemon serves, and `serve_metrics` that starts it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final, Protocol
from urllib.parse import parse_qs

from isal import isal_zlib
from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics

from hami.core import klog, tracing
from hami.core.profiling import is_pprof_path, make_pprof_app
from hami.core.serve.guard import Environ, StartResponse, WSGIApp
from hami.core.serve.landing import Link, links, make_landing
from hami.core.serve.listener import DEFAULT_MAX_CONNECTIONS
from hami.core.serve.server import Server, serve_wsgi
from hami.core.serve.webconfig import WebConfig

log = klog.get_logger(__name__)

ReadyCheck = Callable[[], bool | tuple[bool, str]]

_TEXT = [("Content-Type", "text/plain; charset=utf-8")]
_GZIP: Final = 16 + isal_zlib.MAX_WBITS  # window bits for a gzip header and trailer

SCRAPE_SPAN: Final = "hami.metrics.scrape"  # each /metrics request with tracing on (docs/design/tracing.md)


class Exposition(Protocol):
    """Families a component renders itself, for scrape cost (the monitor's thousands of series).

    ``render(openmetrics)`` is their text format 0.0.4, or their OpenMetrics 1.0.0 body without
    ``# EOF`` (legacy name escaping), byte for byte as prometheus_client writes them, in pieces
    that are sent (or compressed) one after the other, never joined; ``collect()``
    yields the same families as metrics for every other request (other escaping schemes, text
    1.0.0, ``name[]`` filters). Their names must not clash with the registry's.
    """

    def render(self, openmetrics: bool) -> Sequence[bytes]: ...

    def collect(self) -> Iterable[Metric]: ...


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
    exposition: Exposition | None = None,
    *,
    name: str = "hami",
    extra_links: Sequence[Link] = (),
) -> WSGIApp:
    """/ (a landing page titled `name` linking the endpoints and `extra_links`, the paths
    `extra_app` serves), /metrics, /healthz, /readyz, /debug/pprof/* (if `profiling`); anything
    else -> `extra_app`.

    With `exposition`, /metrics serves it together with `registry` (see `Exposition`).
    """
    metrics: WSGIApp = make_wsgi_app(registry) if exposition is None else _metrics_app(registry, exposition)
    pprof = make_pprof_app() if profiling else None
    landing = make_landing(name, links(profiling, extra_links))

    def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            # a trace of its own with --enable-tracing: a scrape is no pod's work
            span = tracing.own_span(SCRAPE_SPAN)
            try:
                return metrics(environ, start_response)
            finally:
                tracing.end(span)
        if path == "/":
            return landing(environ, start_response)
        if path == "/healthz":
            start_response("200 OK", _TEXT)
            return [b"ok\n"]
        if path == "/readyz":
            ok, reason = readiness(ready)
            start_response("200 OK" if ok else "503 Service Unavailable", _TEXT)
            return [b"ok\n" if ok else f"not ready: {reason}\n".encode()]
        if pprof is not None and is_pprof_path(path):
            return pprof(environ, start_response)
        if extra_app is not None:
            return extra_app(environ, start_response)
        start_response("404 Not Found", _TEXT)
        return [b"404 page not found\n"]

    return app


class _Combined:
    """The registry's families, then the exposition's; filtered by sample name for ``name[]``."""

    def __init__(self, registry: CollectorRegistry, exposition: Exposition,
                 names: frozenset[str] | None = None) -> None:
        self._registry = registry
        self._exposition = exposition
        self._names = names

    def restricted_registry(self, names: Iterable[str]) -> _Combined:
        return _Combined(self._registry, self._exposition, frozenset(names))

    def collect(self) -> Iterable[Metric]:
        for metric in (*self._registry.collect(), *self._exposition.collect()):
            if self._names is None:
                yield metric
                continue
            kept = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            kept.samples = [s for s in metric.samples if s.name in self._names]
            if kept.samples:
                yield kept


# What choose_encoder answers for text 0.0.4 and for OpenMetrics 1.0.0 with legacy escaping
# (what Prometheus 2.x asks for first): the formats an Exposition renders itself.
_RENDERED: Final = {
    CONTENT_TYPE_PLAIN_0_0_4: False,
    openmetrics.CONTENT_TYPE_LATEST: True,
    openmetrics.CONTENT_TYPE_LATEST + "; escaping=" + openmetrics.UNDERSCORES: True,
}


def _metrics_app(registry: CollectorRegistry, exposition: Exposition) -> WSGIApp:
    """A GET in a format the exposition renders takes its own text; anything else the full set."""
    general: WSGIApp = make_wsgi_app(_Combined(registry, exposition))

    def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
        om = _RENDERED.get(content_type)
        if (
            om is None
            or environ.get("REQUEST_METHOD") != "GET"
            or "name[]" in parse_qs(environ.get("QUERY_STRING", ""))
        ):
            return general(environ, start_response)
        # the registry's part last: in OpenMetrics it ends with the one "# EOF"
        parts = [*exposition.render(om), encoder(registry)]
        headers = [("Content-Type", content_type)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            # ISA-L's deflate at level 1: the extender's 10 MB body at 1,000 nodes x 8 GPUs in a
            # fraction of zlib's time at its level 1, at the same ratio; the scrape's largest single
            # cost otherwise (docs/design/extender-performance.md). One pass: the gzip stream computes
            # its CRC as it compresses.
            gz = isal_zlib.compressobj(1, isal_zlib.DEFLATED, _GZIP)
            parts = [b"".join([*map(gz.compress, parts), gz.flush()])]
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(sum(map(len, parts)))))
        start_response("200 OK", headers)
        return parts

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
    exposition: Exposition | None = None,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    extra_links: Sequence[Link] = (),
) -> Server:
    """Start the daemon's HTTP server (see the package docstring); its listener's connection
    figures go on ``registry``; its landing page is titled ``name``."""
    app = make_app(registry, ready, profiling, extra_app, exposition, name=name, extra_links=extra_links)
    return serve_wsgi(
        bind, app, web_config=web_config, web_config_file=web_config_file, name=name,
        max_connections=max_connections, registry=registry,
    )
