"""A lean keep-alive HTTP/1.1 transport to the API server, on ``http.client``.

Every request the daemons make goes through ``raw``, and most carry a small JSON body. Through the
generated client and urllib3 such a request cost about 0.45 ms of CPU on the client side; this
pool costs about 0.2 ms, which is what lets the extender do its six API calls per pod within its
per-pod budget (see bench/bench_extender.py). It takes the server address and TLS settings from the
same ``kubernetes.client.Configuration`` the rest of the client uses; the caller adds auth headers.

Semantics kept from the urllib3 path: one request is one attempt (no retries); a timeout bounds the
connect and every socket read (a number for both, or a ``(connect, read)`` pair); a pooled
connection the server has closed is noticed before reuse and replaced.
"""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import ssl
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

Timeout = float | tuple[float, float] | None

# client-go keeps up to 100 idle connections per host; urllib3's kubernetes default is 5 per CPU.
DEFAULT_POOL_SIZE = 16


class UnsupportedConfiguration(ValueError):
    """The configuration needs something this transport does not do (a proxy)."""


def _ssl_context(cfg: Any) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
    data = getattr(cfg, "ca_cert_data", None)
    if data:
        ctx.load_verify_locations(cadata=data)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file or None)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif cfg.assert_hostname is False:
        ctx.check_hostname = False
    return ctx


def _split_timeout(timeout: Timeout) -> tuple[float | None, float | None]:
    if timeout is None:
        return None, None
    if isinstance(timeout, tuple):
        return timeout
    return timeout, timeout


class _HTTPSConnection(http.client.HTTPSConnection):
    """An HTTPS connection that can verify against (and send SNI for) a name other than the host."""

    def __init__(self, host: str, port: int | None, *, context: ssl.SSLContext,
                 server_hostname: str | None, timeout: float | None) -> None:
        super().__init__(host, port, context=context, timeout=timeout)
        self._context = context
        self._server_hostname = server_hostname or host

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_hostname)


class Response:
    """One response. ``read`` takes the whole body and hands the connection back to the pool;
    ``read1`` streams (watches); ``close`` drops a connection whose body was not read to the end."""

    def __init__(self, pool: HttpTransport, conn: http.client.HTTPConnection,
                 response: http.client.HTTPResponse) -> None:
        self._pool = pool
        self._conn: http.client.HTTPConnection | None = conn
        self._response = response
        self.status = response.status
        self.reason = response.reason
        self.headers = response.headers

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self._response.getheader(name, default)

    def read(self) -> bytes:
        try:
            data = self._response.read()
        except BaseException:
            self.close()
            raise
        self._finish()
        return data

    def read1(self, amount: int) -> bytes:
        data = self._response.read1(amount)
        if not data:
            self._finish()
        return data

    def shutdown(self) -> None:
        """Unblock a reader stuck in ``read1`` (from another thread): the connection is dropped."""
        conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed by the peer
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._response.close()
            conn.close()

    release_conn = close  # the name urllib3's responses use; nothing is left to release after close

    def _finish(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._response.will_close:
            conn.close()
        else:
            self._pool.put(conn)


class HttpTransport:
    """A pool of keep-alive connections to the one server ``cfg.host`` names."""

    def __init__(self, cfg: Any, pool_size: int | None = None) -> None:
        if cfg.proxy:
            raise UnsupportedConfiguration(f"proxy {cfg.proxy!r} is not supported by the lean transport")
        url = urlsplit(cfg.host)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise UnsupportedConfiguration(f"unsupported API server address {cfg.host!r}")
        self.base_path = url.path.rstrip("/")
        self._host = url.hostname
        self._port = url.port
        self._tls = _ssl_context(cfg) if url.scheme == "https" else None
        name = cfg.tls_server_name or (cfg.assert_hostname if isinstance(cfg.assert_hostname, str) else None)
        self._server_hostname: str | None = name
        self._size = pool_size or cfg.connection_pool_maxsize or DEFAULT_POOL_SIZE
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def request(self, method: str, target: str, headers: Mapping[str, str], body: bytes | None,
                timeout: Timeout) -> Response:
        """Send one request for ``target`` (path and query, below the base path); return the
        response once its status and headers are in. Raises ``OSError`` (timeouts included) or
        ``http.client.HTTPException`` when no usable response came back."""
        connect_timeout, read_timeout = _split_timeout(timeout)
        conn = self._take(connect_timeout)
        try:
            if conn.sock is None:
                conn.connect()
            sock = conn.sock
            if sock is not None:
                sock.settimeout(read_timeout)
            conn.request(method, self.base_path + target, body=body, headers=dict(headers))
            response = conn.getresponse()
        except BaseException:
            conn.close()
            raise
        return Response(self, conn, response)

    def put(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self._size:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _take(self, connect_timeout: float | None) -> http.client.HTTPConnection:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._new(connect_timeout)
            if _usable(conn):
                return conn
            conn.close()

    def _new(self, connect_timeout: float | None) -> http.client.HTTPConnection:
        if self._tls is not None:
            return _HTTPSConnection(self._host, self._port, context=self._tls,
                                    server_hostname=self._server_hostname, timeout=connect_timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=connect_timeout)


def _usable(conn: http.client.HTTPConnection) -> bool:
    """An idle keep-alive connection is readable only if the server closed it (or misbehaved)."""
    sock = conn.sock
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return not poller.poll(0)
