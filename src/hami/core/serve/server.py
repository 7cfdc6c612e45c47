"""Run any WSGI app on Hypercorn in a background thread, with web-config TLS and basic auth.

Every node and network peer is untrusted, so no client may hold what others need:

- Connections are read by one asyncio event loop (Hypercorn): a TLS handshake, a slow request
  head or an idle connection costs a coroutine, never a thread. A handshake must finish within
  ``HANDSHAKE_TIMEOUT_S``; a new connection's first request head, and any later idle gap, within
  ``IDLE_TIMEOUT_S`` (Hypercorn's keep-alive timer runs from the accept until a whole request head
  has arrived); a body within ``guard.BODY_TIMEOUT_S`` of its head (408) and up to ``max_body``
  bytes (413). The WSGI app is called only once the whole request is in.
- The app runs on ``threads`` daemon threads, and only the app: its response is written from the
  loop, so a client that does not read holds no thread (and is given up after
  ``guard.WRITE_TIMEOUT_S``); a request still running when the daemon stops does not keep the process
  alive.
- Each listener bounds its open connections (``listener.BoundedListener``) and counts refusals.
  Hypercorn notices that a peer closed an idle connection only when its idle timer fires, so such
  a connection keeps its slot (and descriptor) for up to ``IDLE_TIMEOUT_S``.

Hypercorn was chosen over cheroot (the TLS handshake runs on its accept thread and every new
connection takes a worker thread until its head is read), waitress (no TLS), uvicorn (no timer on
a connection until its first request) and gunicorn (a process manager, not a library); the
comparison and the figures are in docs/design/serving.md.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Iterable, Mapping
from types import TracebackType
from typing import Any, Final

from hypercorn.asyncio.run import worker_serve
from hypercorn.config import Config, Sockets
from hypercorn.utils import wrap_app
from prometheus_client import CollectorRegistry

from hami.core import klog
from hami.core.serve.guard import Direct, Environ, Guard, StartResponse, Workers, WSGIApp
from hami.core.serve.listener import DEFAULT_MAX_CONNECTIONS, ConnectionLimit, listen, listener_metrics
from hami.core.serve.webconfig import BasicAuth, ReloadingTLS, WebConfig, load_web_config

log = klog.get_logger(__name__)

# Paths answered without credentials so that kubelet probes work; they reveal only ok/not-ready.
UNAUTHENTICATED_PATHS: Final = frozenset({"/healthz", "/readyz"})

HANDSHAKE_TIMEOUT_S: Final = 10.0
IDLE_TIMEOUT_S: Final = 10.0
GRACE_S: Final = 3.0  # in-flight requests get this long to finish when the server stops
MAX_BODY: Final = 1 << 20
LISTEN_BACKLOG: Final = 256  # a burst of kube-scheduler calls must not see resets


def parse_bind(bind: str) -> tuple[str, int]:
    """`":9394"`, `"0.0.0.0:9394"`, `"[::1]:9394"`, `"localhost:0"` -> (host, port).

    An empty host means every address: `::` (dual stack) where IPv6 exists, else `0.0.0.0`.
    """
    host, sep, port_text = bind.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"bind address {bind!r} is not HOST:PORT (e.g. ':9394', '127.0.0.1:0')")
    host = host.removeprefix("[").removesuffix("]")
    if not host:
        host = "::" if socket.has_ipv6 else "0.0.0.0"
    return host, int(port_text)


def basic_auth_middleware(app: WSGIApp, auth: BasicAuth, realm: str = "hami") -> WSGIApp:
    def guarded(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") in UNAUTHENTICATED_PATHS or _authorized(environ, auth):
            return app(environ, start_response)
        start_response("401 Unauthorized", [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("WWW-Authenticate", f'Basic realm="{realm}"'),
        ])
        return [b"Unauthorized\n"]

    return guarded


def _authorized(environ: Environ, auth: BasicAuth) -> bool:
    header = environ.get("HTTP_AUTHORIZATION", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        user, sep, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    return bool(sep) and auth.check(user, password)


def _loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio's unhandled errors, through klog; a connection cancelled at shutdown is no error."""
    err = context.get("exception")
    if isinstance(err, asyncio.CancelledError):
        return
    log.error("http server: %s: %s", context.get("message", "unhandled error"), err)


class _HypercornConfig(Config):
    """Hypercorn's config with our TLS context (and its certificate reload) instead of its own."""

    def __init__(self, context: ssl.SSLContext | None) -> None:
        super().__init__()
        self._context = context

    @property
    def ssl_enabled(self) -> bool:
        return self._context is not None

    def create_ssl_context(self) -> ssl.SSLContext | None:
        return self._context


def _server_context(reloading: ReloadingTLS) -> ssl.SSLContext:
    """The handshake context: each handshake switches to the current (reloaded) certificate."""
    base = reloading.context()

    def pick(sslobj: ssl.SSLObject, _server_name: str | None, _ctx: ssl.SSLContext) -> None:
        current = reloading.context()
        if sslobj.context is not current:
            sslobj.context = current

    # OpenSSL calls it on every ClientHello, whether or not the client sent a server name
    base.sni_callback = pick
    return base


class Server:
    """A started server; `stop()` (or leaving a `with` block) shuts it down."""

    def __init__(
        self, sock: socket.socket, app: WSGIApp, *, name: str, threads: int, max_body: int,
        tls: ReloadingTLS | None, limit: ConnectionLimit, direct: Mapping[str, Direct] | None = None,
    ) -> None:
        self.tls = tls
        self.limit = limit
        self._addr = sock.getsockname()
        config = _HypercornConfig(_server_context(tls) if tls is not None else None)
        config.keep_alive_timeout = IDLE_TIMEOUT_S
        config.ssl_handshake_timeout = HANDSHAKE_TIMEOUT_S
        config.graceful_timeout = GRACE_S
        config.backlog = LISTEN_BACKLOG
        config.h2_max_concurrent_streams = threads
        config.include_server_header = False
        config.errorlog = logging.getLogger("hypercorn.error")
        config.accesslog = None
        sockets = Sockets([sock] if tls is not None else [], [] if tls is not None else [sock], [])
        self._workers = Workers(threads, name)
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(_loop_error)
        self._stopping = asyncio.Event()
        serving = worker_serve(
            wrap_app(Guard(app, max_body, self._workers, direct), max_body, "asgi"),  # type: ignore[arg-type]
            config, sockets=sockets, shutdown_trigger=self._stopping.wait,
        )
        self._thread = threading.Thread(target=self._run, args=(serving,), name=f"{name}-http", daemon=True)
        self._thread.start()

    def _run(self, serving: Awaitable[None]) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(serving)
        except Exception:
            log.error("http server stopped on an error", exc_info=True)
        finally:
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()
            self._workers.shutdown()

    @property
    def host(self) -> str:
        return str(self._addr[0])

    @property
    def port(self) -> int:
        return int(self._addr[1])

    @property
    def url(self) -> str:
        """Base URL reachable locally (wildcard binds are reached through loopback)."""
        host = {"::": "[::1]", "0.0.0.0": "127.0.0.1"}.get(self.host, self.host)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, give in-flight requests ``GRACE_S``, and return within ``timeout``.

        Connections still open after the grace are shut down: Hypercorn would otherwise wait on
        each TLS one for a close_notify its peer may never send (asyncio waits 30 s).
        """
        deadline = time.monotonic() + timeout
        with contextlib.suppress(RuntimeError):  # the loop already closed
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(min(GRACE_S + 0.5, timeout))
        if self._thread.is_alive():
            self.limit.shut_all()
            self._thread.join(max(deadline - time.monotonic(), 0))

    def __enter__(self) -> Server:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def serve_wsgi(
    bind: str,
    app: WSGIApp,
    *,
    web_config: WebConfig | None = None,
    web_config_file: str | None = None,
    name: str = "hami",
    threads: int = 8,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    max_body: int = MAX_BODY,
    registry: CollectorRegistry | None = None,
    direct: Mapping[str, Direct] | None = None,
) -> Server:
    """Serve `app` on `bind` in a daemon thread; returns once the socket listens.

    TLS/basic auth come from `web_config` or from `web_config_file` (exporter-toolkit YAML; an
    invalid file raises `WebConfigError` here). Bind errors raise `OSError` here, not later.
    With `registry`, the listener's connection figures are exported there, labelled `name`.
    `direct` maps paths whose POSTs skip the WSGI layer (a daemon's hot routes: the extender's
    /filter and /bind, twice per pod): the same body limit and deadlines, the handler on the same
    workers, but no environ, no start_response and no framework. `app` must answer those paths
    too: with basic auth configured, every request goes through it, behind the check.
    """
    if web_config is None and web_config_file:
        web_config = load_web_config(web_config_file)
    if web_config is not None and web_config.basic_auth_users:
        app = basic_auth_middleware(app, BasicAuth(web_config.basic_auth_users), realm=name)
        direct = None
    reloading = None
    if web_config is not None and web_config.tls is not None:
        reloading = ReloadingTLS(web_config.tls)
    host, port = parse_bind(bind)
    limit = ConnectionLimit(max_connections)
    try:
        sock = listen(host, port, limit, LISTEN_BACKLOG)
    except OSError:
        if host != "::":
            raise
        # No usable IPv6 (e.g. disabled in the pod): fall back to IPv4 wildcard.
        sock = listen("0.0.0.0", port, limit, LISTEN_BACKLOG)
    if registry is not None:
        listener_metrics(registry).add(name, limit)
    server = Server(
        sock, app, name=name, threads=threads, max_body=max_body, tls=reloading, limit=limit, direct=direct,
    )
    log.info("serving %s on %s", name, server.url)
    return server
