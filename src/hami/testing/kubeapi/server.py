"""`KubeAPIServer`: the emulator served over real HTTP/1.1 from a background thread."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from hami.testing.kubeapi import errors, routes
from hami.testing.kubeapi.faults import Fault, Faults, Request, RequestLog
from hami.testing.kubeapi.store import Store
from hami.testing.kubeapi.watch import WatchRequest, stream


class _HTTPServer(ThreadingHTTPServer):
    """Tracks open connections so that `stop()` can end keep-alive and watch connections."""

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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, keep-alive requests stall ~40 ms.
    disable_nagle_algorithm = True
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read `server.requests` instead of stderr."""

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        emulator = self.server.emulator
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        watching = method == "GET" and query.get("watch") in ("true", "1")
        record = {"method": method, "path": url.path, "query": query, "content_type": content_type,
                  "watch": watching}
        fault = emulator.faults.take(method, url.path, watching)
        if fault is not None and fault.delay > 0 and emulator.stopping.wait(fault.delay):
            self.close_connection = True
            return
        extra: dict[str, str] = {}
        try:
            if fault is not None and fault.status is not None:
                raise errors.ApiError(fault.status, fault.message or f"injected fault: HTTP {fault.status}")
            segments = [s for s in url.path.split("/") if s]
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
                status, reply = routes.serve(emulator.store, method, route, query=query,
                                             content_type=content_type, body=body)
        except errors.ApiError as err:
            if fault is not None and err.code in (429, 503):
                extra["Retry-After"] = str(fault.retry_after)
            status, reply = err.code, err.status()
        except Exception as exc:  # a bug in the emulator must reach the test as a 500, not a hang
            status, reply = 500, errors.ApiError(500, f"emulator error: {exc!r}").status()
        self._reply(status, reply, record, extra)

    def _reply(self, status: int, body: dict[str, Any], record: dict[str, Any],
               headers: dict[str, str] | None = None) -> None:
        self.server.emulator.requests.add(Request(status=status, **record))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, watch: WatchRequest, record: dict[str, Any], fault: Fault | None) -> None:
        emulator = self.server.emulator
        emulator.requests.add(Request(status=200, **record))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        drop_after = fault.after_events if fault is not None and fault.drop_watch else None
        sent = 0
        with self.server.watches_done:
            self.server.watches += 1
        events = stream(emulator.store, watch, emulator.stopping.is_set, emulator.bookmark_interval)
        try:
            for ready in events if drop_after != 0 else ():
                batch = ready if drop_after is None else ready[:drop_after - sent]
                data = b"".join(batch)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                sent += len(batch)
                if drop_after is not None and sent >= drop_after:
                    break
            if drop_after is not None:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)  # no closing chunk: the client sees a cut
                return
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True  # the client went away
        finally:
            with self.server.watches_done:
                self.server.watches -= 1
                self.server.watches_done.notify_all()


class KubeAPIServer:
    """A stateful Kubernetes API emulator on `http://host:port` (port 0: the OS picks one).

    `history` bounds the watch window (older resourceVersions get 410 Expired);
    `bookmark_interval` is how often watches with allowWatchBookmarks get a BOOKMARK.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, history: int = 1000,
                 bookmark_interval: float = 1.0) -> None:
        self.host = host
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
        # Watch handlers see `stopping` within one poll and write their closing chunk; a handler
        # stuck writing to a client that stopped reading is cut after the bounded wait.
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
