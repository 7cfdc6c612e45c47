"""HTTP serving for every daemon: metrics, health, readiness, pprof, and component apps.

Component-facing API::

    from hami.core.serve import serve_metrics, serve_wsgi, build_info, add_web_flags

    add_web_flags(parser)                        # --web.config.file, --web.max-connections
    build_info("monitor", registry)              # hami_build_info{...} 1 + process/platform/GC
    server = serve_metrics(
        ":9394", registry,
        ready=lambda: (informer.has_synced(), "pod informer not synced"),  # or -> bool
        web_config_file=args.web_config_file,    # TLS + basic auth; invalid file raises here
        profiling=args.profiling,                # /debug/pprof/ (hami.core.profiling)
        extra_app=flask_app,                     # optional: serves every other path
        name="hami-monitor",
        exposition=collector,                    # optional: families rendered by the component
        max_connections=args.web_max_connections,  # beyond it: closed unread, counted
    )
    ...
    server.stop()                                # or `with serve_metrics(...) as server:`

    # A component app on its own port (e.g. the extender's /filter, /bind, /webhook over TLS):
    serve_wsgi(":443", flask_app, web_config=WebConfig(tls=TLSConfig(cert_file=..., key_file=...)))

Endpoints: `/` (a landing page: the daemon's name, version and links to its endpoints), `/metrics`
(prometheus_client exposition; OpenMetrics when the scraper's Accept asks for it; gzip when
accepted; with `exposition`, a plain text-0.0.4 scrape takes the component's own rendering of its
families and every other request the same families as metrics), `/healthz` (200 while the server
answers), `/readyz` (200, or 503 with `not ready: <reason>`; a check that raises counts as not
ready). Basic auth, when configured, guards every path except /healthz and
/readyz so kubelet probes need no credentials. `bind` is `HOST:PORT`; an empty host listens on
all addresses; port 0 picks a free port (`server.port`, `server.url`). TLS certificates are
re-read when their files change. Slow, idle and flooding clients are bounded as `server` says;
every listener's open, maximum and refused connections are `hami_http_*` on its registry.
"""

from __future__ import annotations

from hami.core.serve.app import Exposition, ReadyCheck, make_app, serve_metrics
from hami.core.serve.build_info import build_info
from hami.core.serve.listener import listener_metrics
from hami.core.serve.server import Server, parse_bind, serve_wsgi
from hami.core.serve.webconfig import (
    TLSConfig,
    WebConfig,
    WebConfigError,
    add_web_flags,
    load_web_config,
)

__all__ = [
    "Exposition", "ReadyCheck", "Server", "TLSConfig", "WebConfig", "WebConfigError", "add_web_flags",
    "build_info", "listener_metrics", "load_web_config", "make_app", "parse_bind", "serve_metrics",
    "serve_wsgi",
]
