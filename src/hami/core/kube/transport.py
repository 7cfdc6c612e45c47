"""A lean keep-alive HTTP/1.1 transport to the API server.

Every request the daemons make goes through ``raw``, and most carry a small JSON body. The
generated client with urllib3, and even ``http.client`` (its header parsing above all), cost several
times the client CPU of this, which speaks only the little HTTP/1.1 the API server needs (one
buffered ``sendall``, Content-Length and chunked bodies, keep-alive); docs/design/extender-performance.md
has the figures.
That is what lets the extender make its six API calls per pod within its per-pod budget (see
bench/bench_extender.py). Server address and TLS settings come from the same
``kubernetes.client.Configuration`` as the rest of the client; the caller adds auth headers.

Semantics kept from the urllib3 path: one request is one attempt (no retries); a timeout bounds the
connect and every socket read (a number for both, or a ``(connect, read)`` pair); a pooled
connection the server has closed is noticed before reuse and replaced. Failures raise ``OSError``
(timeouts included) or ``http.client``'s protocol errors.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
from collections.abc import Mapping
from http.client import BadStatusLine, IncompleteRead, LineTooLong, RemoteDisconnected
from io import BufferedReader
from typing import Any
from urllib.parse import urlsplit

Timeout = float | tuple[float, float] | None

DEFAULT_POOL_SIZE = 16
_MAX_LINE = 65536
_MAX_HEADERS = 100
_CHUNKED, _LENGTH, _TO_EOF, _NONE = range(4)


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


def _readline(rfile: BufferedReader) -> bytes:
    line = rfile.readline(_MAX_LINE + 1)
    if len(line) > _MAX_LINE:
        raise LineTooLong("header line")
    return line


def _head(rfile: BufferedReader) -> list[str]:
    """The status line and header lines of one response, without line ends, through the blank line.

    A head already in the read buffer (the usual case: a few hundred bytes, read with the body's
    start) is taken in one read and one split instead of a ``readline`` per line."""
    buffered = rfile.peek(1)
    end = buffered.find(b"\r\n\r\n")
    # Only a head of CRLF lines: a bare-LF head would end before that CRLF CRLF (in the body).
    if end >= 0 and buffered.count(b"\n", 0, end) == buffered.count(b"\r\n", 0, end):
        lines = rfile.read(end + 4)[:end].decode("latin-1").split("\r\n")
        if len(lines) > _MAX_HEADERS + 1:
            raise LineTooLong(f"more than {_MAX_HEADERS} headers")
        return lines
    first = _readline(rfile)
    if not first:
        raise RemoteDisconnected("the server closed the connection without a response")
    lines = [first.decode("latin-1").rstrip("\r\n")]
    for _ in range(_MAX_HEADERS):
        line = _readline(rfile)
        if line in (b"\r\n", b"\n", b""):
            return lines
        lines.append(line.decode("latin-1").rstrip("\r\n"))
    raise LineTooLong(f"more than {_MAX_HEADERS} headers")


def _headers(fields: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for field in fields:
        name, _, value = field.partition(":")
        key = name.strip().lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


class _Connection:
    """One socket to the server and its buffered reader."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.rfile: BufferedReader = sock.makefile("rb")

    def close(self) -> None:
        self.rfile.close()
        self.sock.close()

    def usable(self) -> bool:
        """An idle keep-alive connection is readable only if the server closed it (or misbehaved)."""
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        return not poller.poll(0)


class Response:
    """One response. ``read`` takes the whole body and hands the connection back to the pool;
    ``read1`` streams (watches); ``close`` drops a connection whose body was not read to the end."""

    def __init__(self, pool: HttpTransport, conn: _Connection, method: str) -> None:
        self._pool = pool
        self._conn: _Connection | None = conn
        rfile = conn.rfile
        while True:
            status_line, *fields = _head(rfile)
            version, _, rest = status_line.partition(" ")
            code, _, reason = rest.partition(" ")
            if not version.startswith("HTTP/") or len(code) != 3 or not code.isdigit():
                raise BadStatusLine(status_line)
            self.status, self.reason = int(code), reason.strip()
            self.headers = _headers(fields)
            if self.status != 100:
                break
        connection = self.headers.get("connection", "").lower()
        self.will_close = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
        self._remaining = 0
        if method == "HEAD" or self.status in (204, 304) or self.status < 200:
            self._framing = _NONE
        elif "chunked" in self.headers.get("transfer-encoding", "").lower():
            self._framing = _CHUNKED
        elif "content-length" in self.headers:
            self._framing = _LENGTH
            try:
                self._remaining = int(self.headers["content-length"])
            except ValueError:
                raise BadStatusLine(f"bad Content-Length {self.headers['content-length']!r}") from None
        else:
            self._framing = _TO_EOF
            self.will_close = True
        if self._framing == _NONE or (self._framing == _LENGTH and self._remaining == 0):
            self._finish()

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)

    def read(self) -> bytes:
        """The whole (rest of the) body."""
        conn = self._conn
        if conn is not None and self._framing == _LENGTH:  # one buffered read, not a read1 per 8 KB
            try:
                data = conn.rfile.read(self._remaining)
                if len(data) < self._remaining:
                    raise IncompleteRead(data, self._remaining - len(data))
            except BaseException:
                self.close()
                raise
            self._remaining = 0
            self._finish()
            return data
        parts: list[bytes] = []
        while True:
            data = self.read1(_MAX_LINE)
            if not data:
                return b"".join(parts)
            parts.append(data)

    def read1(self, amount: int) -> bytes:
        """Up to ``amount`` bytes, waiting only while none are available; b"" at the end."""
        conn = self._conn
        if conn is None:
            return b""
        try:
            data = self._next(conn.rfile, amount)
        except BaseException:
            self.close()
            raise
        if not data:
            self._finish()
        return data

    def _next(self, rfile: BufferedReader, amount: int) -> bytes:
        if self._framing == _TO_EOF:
            return rfile.read1(amount)
        if self._framing == _CHUNKED and self._remaining == 0:
            self._remaining = self._chunk_size(rfile)
            if self._remaining == 0:
                return b""
        if self._remaining == 0:
            return b""
        data = rfile.read1(min(amount, self._remaining))
        if not data:
            raise IncompleteRead(b"", self._remaining)
        self._remaining -= len(data)
        if self._framing == _CHUNKED and self._remaining == 0 and _readline(rfile) not in (b"\r\n", b"\n"):
            raise BadStatusLine("chunk not followed by CRLF")
        return data

    @staticmethod
    def _chunk_size(rfile: BufferedReader) -> int:
        line = _readline(rfile)
        if not line:
            raise IncompleteRead(b"")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadStatusLine(f"bad chunk size line {line[:40]!r}") from None
        if size == 0:
            while _readline(rfile) not in (b"\r\n", b"\n", b""):
                pass  # trailer fields: none that matter here
        return size

    def shutdown(self) -> None:
        """Unblock a reader stuck in ``read1`` (from another thread): the connection is dropped."""
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(OSError):  # already closed by the peer
                conn.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    release_conn = close  # the name urllib3's responses use; nothing is left to release after close

    def _finish(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self.will_close:
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
        self._address = (url.hostname, url.port or (443 if url.scheme == "https" else 80))
        self._tls = _ssl_context(cfg) if url.scheme == "https" else None
        name = cfg.tls_server_name or (cfg.assert_hostname if isinstance(cfg.assert_hostname, str) else None)
        self._server_hostname = name or url.hostname
        self._host_header = url.netloc.rpartition("@")[2].encode("idna")
        self._size = pool_size or cfg.connection_pool_maxsize or DEFAULT_POOL_SIZE
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    def request(self, method: str, target: str, headers: Mapping[str, str], body: bytes | None,
                timeout: Timeout) -> Response:
        """Send one request for ``target`` (path and query, below the base path); return the
        response once its status line and headers are in."""
        connect_timeout, read_timeout = _split_timeout(timeout)
        head = [f"{method} {self.base_path}{target} HTTP/1.1".encode("latin-1"),
                b"Host: " + self._host_header]
        head.extend(f"{k}: {v}".encode("latin-1") for k, v in headers.items())
        if body is not None or method in ("POST", "PUT", "PATCH"):
            head.append(b"Content-Length: %d" % len(body or b""))
        message = b"\r\n".join(head) + b"\r\n\r\n" + (body or b"")
        conn = self._take(connect_timeout)
        try:
            conn.sock.settimeout(read_timeout)
            conn.sock.sendall(message)
            return Response(self, conn, method)
        except BaseException:
            conn.close()
            raise

    def put(self, conn: _Connection) -> None:
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

    def _take(self, connect_timeout: float | None) -> _Connection:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect(connect_timeout)
            if conn.usable():
                return conn
            conn.close()

    def _connect(self, connect_timeout: float | None) -> _Connection:
        sock = socket.create_connection(self._address, timeout=connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=self._server_hostname)
        except BaseException:
            sock.close()
            raise
        return _Connection(sock)
