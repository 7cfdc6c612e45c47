"""The landing page every daemon serves at ``/``: a person who opens the bare address the demo (or a
Service) prints sees what answers there and where its endpoints are, as the Prometheus
exporter-toolkit's landing page shows them (name, version, links), instead of a 404."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

import hami
from hami.core.serve.guard import Environ, StartResponse, WSGIApp

Link = tuple[str, str]  # (path, what it is)


def links(profiling: bool, extra: Sequence[Link] = ()) -> list[Link]:
    """The endpoints of ``make_app``: metrics, health, readiness, pprof when mounted, then ``extra``."""
    out: list[Link] = [("/metrics", "Metrics"), ("/healthz", "Health"), ("/readyz", "Readiness")]
    if profiling:
        out.append(("/debug/pprof/", "Profiling (pprof)"))
    return [*out, *extra]


def page(name: str, endpoints: Iterable[Link]) -> bytes:
    items = "\n".join(
        f'<li><a href="{html.escape(path)}">{html.escape(text)}</a> <code>{html.escape(path)}</code></li>'
        for path, text in endpoints
    )
    title = html.escape(name)
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>"
        f"{title}</title></head>\n<body>\n<h1>{title}</h1>\n"
        f"<p>hami version {html.escape(hami.__version__)}</p>\n<ul>\n{items}\n</ul>\n</body></html>\n"
    ).encode()


def make_landing(name: str, endpoints: Sequence[Link]) -> WSGIApp:
    """A WSGI app answering every request with the page (``make_app`` routes only ``/`` to it)."""
    body = page(name, endpoints)
    headers = [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(body)))]

    def landing(_environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        start_response("200 OK", headers)
        return [body]  # the server drops a HEAD's body

    return landing
