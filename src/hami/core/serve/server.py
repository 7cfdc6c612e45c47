"""Run any WSGI app on cheroot in a background thread, with web-config TLS and basic auth."""

from __future__ import annotations

import base64
import binascii
import socket
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, Final

from cheroot import wsgi
from cheroot.ssl.builtin import BuiltinSSLAdapter

from hami.core import klog
from hami.core.serve.webconfig import BasicAuth, ReloadingTLS, WebConfig, load_web_config

log = klog.get_logger(__name__)

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

# Paths answered without credentials so that kubelet probes work; they reveal only ok/not-ready.
UNAUTHENTICATED_PATHS: Final = frozenset({"/healthz", "/readyz"})


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


class _ReloadingSSLAdapter(BuiltinSSLAdapter):
    """cheroot's builtin adapter, but each handshake uses the current (reloaded) context."""

    def __init__(self, reloading: ReloadingTLS, cert_file: str, key_file: str) -> None:
        super().__init__(cert_file, key_file)
        self._reloading = reloading
        self.context = reloading.context()

    def wrap(self, sock: socket.socket) -> Any:
        ctx = self._reloading.context()
        if ctx is not self.context:
            self.context = ctx
        return super().wrap(sock)  # type: ignore[no-untyped-call]


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


class Server:
    """A started cheroot server; `stop()` (or leaving a `with` block) shuts it down."""

    def __init__(self, httpd: wsgi.Server, thread: threading.Thread, tls: ReloadingTLS | None) -> None:
        self._httpd = httpd
        self._thread = thread
        self.tls = tls

    @property
    def host(self) -> str:
        addr = self._httpd.bind_addr
        return str(addr[0])

    @property
    def port(self) -> int:
        return int(self._httpd.bind_addr[1])

    @property
    def url(self) -> str:
        """Base URL reachable locally (wildcard binds are reached through loopback)."""
        host = {"::": "[::1]", "0.0.0.0": "127.0.0.1"}.get(self.host, self.host)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        self._httpd.stop()
        self._thread.join(timeout)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


LISTEN_BACKLOG = 256


class _KlogServer(wsgi.Server):
    """cheroot's server with its error log routed through klog."""

    def error_log(self, msg: str = "", level: int = 20, traceback: bool = False) -> None:
        if level >= 40:
            log.error("http server: %s", msg, exc_info=traceback)
        else:
            log.v(4).info("http server: %s", msg)


def serve_wsgi(
    bind: str,
    app: WSGIApp,
    *,
    web_config: WebConfig | None = None,
    web_config_file: str | None = None,
    name: str = "hami",
    threads: int = 8,
) -> Server:
    """Serve `app` on `bind` in a daemon thread; returns once the socket listens.

    TLS/basic auth come from `web_config` or from `web_config_file` (exporter-toolkit YAML; an
    invalid file raises `WebConfigError` here). Bind errors raise `OSError` here, not later.
    """
    if web_config is None and web_config_file:
        web_config = load_web_config(web_config_file)
    if web_config is not None and web_config.basic_auth_users:
        app = basic_auth_middleware(app, BasicAuth(web_config.basic_auth_users), realm=name)
    host, port = parse_bind(bind)
    # cheroot's default listen backlog is 5: a burst of kube-scheduler calls would see resets.
    httpd = _KlogServer(
        (host, port), app, numthreads=threads, server_name=name, request_queue_size=LISTEN_BACKLOG
    )
    reloading = None
    if web_config is not None and web_config.tls is not None:
        reloading = ReloadingTLS(web_config.tls)
        httpd.ssl_adapter = _ReloadingSSLAdapter(reloading, web_config.tls.cert_file,
                                                 web_config.tls.key_file)
    try:
        httpd.prepare()
    except OSError:
        if host != "::":
            raise
        # No usable IPv6 (e.g. disabled in the pod): fall back to IPv4 wildcard.
        httpd.bind_addr = ("0.0.0.0", port)
        httpd.prepare()
    thread = threading.Thread(target=httpd.serve, name=f"{name}-http", daemon=True)
    thread.start()
    server = Server(httpd, thread, reloading)
    log.info("serving %s on %s", name, server.url)
    return server
