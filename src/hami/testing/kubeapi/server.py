"""`KubeAPIServer`: the emulator served over real HTTP/1.1 from a background thread."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import socket
import socketserver
import sys
import threading
import time
from email.utils import formatdate
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from hami.testing.kubeapi import errors, logs, routes, tables
from hami.testing.kubeapi.faults import Fault, Faults, Request, RequestLog
from hami.testing.kubeapi.store import Store
from hami.testing.kubeapi.watch import Feed, WatchRequest


class _HTTPServer(socketserver.ThreadingTCPServer):
    """Tracks open connections so that `stop()` can end keep-alive and watch connections."""

    allow_reuse_address = True  # a fixed --port can be reused right after a restart
    daemon_threads = False  # server_close() joins every handler thread
    block_on_close = True
    request_queue_size = 128  # concurrent clients must not wait on SYN retransmits
    emulator: KubeAPIServer

    def __init__(self, address: tuple[str, int], emulator: KubeAPIServer) -> None:
        self.emulator = emulator
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        self.watches = 0
        self.watches_done = threading.Condition()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up is routine here (timeouts, dropped watches); anything else is not."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def close_connections(self) -> None:
        with self.connections_lock:
            open_now = list(self.connections)
        for conn in open_now:
            with contextlib.suppress(OSError):  # already closed by the peer
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(socketserver.StreamRequestHandler):
    """HTTP/1.1 with keep-alive, parsed by hand: http.server's email-based header parsing and its
    per-line header writes cost more CPU than serving most requests does."""

    # Small writes (headers, watch chunks) must not wait for ACKs: with Nagle on they stall ~40 ms.
    disable_nagle_algorithm = True
    server: _HTTPServer
    close_connection: bool

    def setup(self) -> None:
        super().setup()
        if self.server.emulator.nagle:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)

    def handle(self) -> None:
        self.close_connection = False
        while not self.close_connection:
            self._handle_one()

    def _handle_one(self) -> None:
        line = self.rfile.readline(_MAX_LINE + 1)
        if not line:
            self.close_connection = True  # the client closed the connection
            return
        if line in (b"\r\n", b"\n"):
            return  # an empty line before a request is to be ignored (RFC 9112 section 2.2)
        if len(line) > _MAX_LINE:
            self._refuse(414, "request line too long")
            return
        words = line.split()
        if len(words) != 3 or not words[2].startswith(b"HTTP/1."):
            self._refuse(400, f"bad request line {line[:200]!r}")
            return
        method, target, version = (w.decode("latin-1") for w in words)
        headers: dict[str, str] = {}
        for _ in range(_MAX_HEADERS):
            field = self.rfile.readline(_MAX_LINE + 1)
            if field in (b"\r\n", b"\n", b""):
                break
            name, _, value = field.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        else:
            self._refuse(431, "too many request headers")
            return
        connection = headers.get("connection", "").lower()
        self.close_connection = connection == "close" or (
            version == "HTTP/1.0" and connection != "keep-alive")
        if "transfer-encoding" in headers:
            self._refuse(411, "a request body needs Content-Length")
            return
        length = headers.get("content-length", "0")
        if not length.isdigit():
            self._refuse(400, f"bad Content-Length {length!r}")
            return
        if headers.get("expect", "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = self.rfile.read(int(length))
        if method not in _METHODS:
            self._refuse(501, f"unsupported method {method!r}")
            return
        self._handle(method, target, headers, body)

    def _refuse(self, status: int, message: str) -> None:
        """A request that cannot be read on: answer it, unlogged, and close the connection."""
        self.close_connection = True
        self._send(status, json.dumps(errors.ApiError(status, message).status()).encode(), {})

    def _handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> None:
        emulator = self.server.emulator
        if not target.startswith("/"):  # absolute form, as clients send it to a proxy
            parts = urlsplit(target)
            target = f"{parts.path or '/'}?{parts.query}"
        path, _, raw_query = target.partition("#")[0].partition("?")
        query = dict(parse_qsl(raw_query, keep_blank_values=True)) if raw_query else {}
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        watching = method == "GET" and query.get("watch") in ("true", "1")
        record: dict[str, Any] = {"method": method, "path": path, "query": query,
                                  "content_type": content_type, "watch": watching}
        fault = emulator.faults.take(method, path, watching)
        if fault is not None and fault.delay > 0 and emulator.stopping.wait(fault.delay):
            self.close_connection = True
            return
        extra: dict[str, str] = {}
        content = "application/json"
        reply: dict[str, Any] | bytes  # bytes: already encoded
        try:
            if fault is not None and fault.status is not None:
                raise errors.ApiError(fault.status, fault.message or f"injected fault: HTTP {fault.status}")
            segments = [s for s in path.split("/") if s]
            document = routes.discovery(segments, f"{emulator.host}:{emulator.port}")
            if document is not None:
                if method != "GET":
                    raise errors.ApiError(405, "the server does not allow this method", "MethodNotAllowed")
                status, reply = 200, document
            else:
                route = routes.parse_route(segments)
                if watching and route.name is None:
                    watch = WatchRequest.from_query(route.rtype, route.namespace, query)
                    self._stream(watch, record, fault)
                    return
                if route.subresource == "log" and method == "GET":
                    pod = emulator.store.read(route.rtype, route.ns, route.name or "").obj
                    status, reply, content = 200, logs.read(pod, query, emulator.log_dir), "text/plain"
                else:
                    status, reply = routes.serve(emulator.store, method, route, query=query,
                                                 content_type=content_type, body=body)
                if method == "GET" and status == 200 and tables.wants_table(headers.get("accept", "")) \
                        and not route.subresource:
                    status, reply = 200, _as_table(route.rtype, reply, query)
        except errors.ApiError as err:
            if fault is not None and err.code in (429, 503):
                extra["Retry-After"] = str(fault.retry_after)
            status, reply = err.code, err.status()
        except Exception as exc:  # a bug in the emulator must reach the test as a 500, not a hang
            status, reply = 500, errors.ApiError(500, f"emulator error: {exc!r}").status()
        emulator.requests.add(Request(status=status, **record))
        if status >= 300:
            content = "application/json"
        self._send(status, reply if isinstance(reply, bytes) else json.dumps(reply).encode(), extra, content)

    def _head(self, status: int, headers: dict[str, str], content_type: str = "application/json") -> bytes:
        lines = [f"HTTP/1.1 {status} {_PHRASES.get(status, '')}", f"Content-Type: {content_type}",
                 f"Date: {_http_date()}", *(f"{k}: {v}" for k, v in headers.items())]
        if self.close_connection:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _send(self, status: int, data: bytes, headers: dict[str, str],
              content_type: str = "application/json") -> None:
        # Head and body in one write: one segment for the client to wait for.
        head = self._head(status, {**headers, "Content-Length": str(len(data))}, content_type)
        self.wfile.write(head + data)

    def _stream(self, watch: WatchRequest, record: dict[str, Any], fault: Fault | None) -> None:
        emulator = self.server.emulator
        emulator.requests.add(Request(status=200, **record))
        self.wfile.write(self._head(200, {"Transfer-Encoding": "chunked"}))
        drop_after = fault.after_events if fault is not None and fault.drop_watch else None
        with self.server.watches_done:
            self.server.watches += 1
        try:
            feed = Feed(watch, self.connection, drop_after)
            if not feed.run(emulator.store, emulator.stopping.is_set, emulator.bookmark_interval):
                self.close_connection = True  # cut by a fault, or the client went away
        finally:
            with self.server.watches_done:
                self.server.watches -= 1
                self.server.watches_done.notify_all()


def _as_table(rtype: Any, reply: dict[str, Any] | bytes, query: dict[str, str]) -> dict[str, Any]:
    """A list or one object as the Table kubectl asked for (Accept: ...;as=Table)."""
    doc = json.loads(reply) if isinstance(reply, bytes) else reply
    if "items" in doc:
        return tables.table(rtype, doc["items"], doc.get("metadata", {}), query.get("includeObject", ""))
    meta = {"resourceVersion": doc["metadata"].get("resourceVersion")}
    return tables.table(rtype, [doc], meta, query.get("includeObject", ""))


_MAX_LINE = 65536
_MAX_HEADERS = 100
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
_PHRASES = {s.value: s.phrase for s in HTTPStatus}


@functools.lru_cache(maxsize=1)
def _format_date(second: int) -> str:
    return formatdate(second, usegmt=True)


def _http_date() -> str:
    """The Date header, formatted once a second."""
    return _format_date(int(time.time()))


SERVING_PREFIX = "kubeapi emulator serving on "
# The line ``python -m hami.testing.kubeapi`` prints once it listens (and the kubeconfig is written):
# group 1 is the server's URL.
SERVING = re.compile(re.escape(SERVING_PREFIX) + r"(\S+)")


class KubeAPIServer:
    """A stateful Kubernetes API emulator on `http://host:port` (port 0: the OS picks one).

    `history` bounds the watch window (older resourceVersions get 410 Expired);
    `bookmark_interval` is how often watches with allowWatchBookmarks get a BOOKMARK;
    `nagle=True` leaves Nagle's algorithm on (a benchmark showing what the delayed-ACK stall costs);
    `log_dir` holds the container logs `kubectl logs` reads (``<ns>_<pod>/<container>.log``).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, history: int = 1000,
                 bookmark_interval: float = 1.0, nagle: bool = False, *,
                 log_dir: Path | None = None) -> None:
        self.host = host
        self.nagle = nagle
        self.log_dir = log_dir  # container logs for pods/log (see logs.py)
        self._requested_port = port
        self.store = Store(history=history)
        self.faults = Faults()
        self.requests = RequestLog()
        self.bookmark_interval = bookmark_interval
        self.stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("KubeAPIServer is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> KubeAPIServer:
        if self._httpd is not None:
            raise RuntimeError("KubeAPIServer already started")
        self._httpd = _HTTPServer((self.host, self._requested_port), self)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"kubeapi-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ends watches cleanly (closing chunk), closes connections, joins every thread."""
        if self._httpd is None:
            return
        self.stopping.set()
        self.store.close()
        self._httpd.shutdown()
        # Closing the store wakes every watch, which writes its closing chunk; a watch stuck
        # writing to a client that stopped reading is cut after the bounded wait.
        with self._httpd.watches_done:
            self._httpd.watches_done.wait_for(lambda: self._httpd is None or self._httpd.watches == 0, 5.0)
        self._httpd.close_connections()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()
        self._httpd = None

    def __enter__(self) -> KubeAPIServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def kubeconfig(self, context: str = "kubeapi-emulator") -> dict[str, Any]:
        """A kubeconfig document (dict) pointing at this server; dump it as YAML or JSON."""
        return {
            "apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": context, "cluster": {"server": self.url}}],
            "users": [{"name": context, "user": {"token": "emulator"}}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context,
                                                       "namespace": "default"}}],
        }
