"""The cluster network, as kube-apiserver sees it: an HTTP CONNECT proxy on a Unix socket, named in
kube-apiserver's EgressSelectorConfiguration for the ``cluster`` network (the way konnectivity
plugs in). kube-apiserver calls a webhook that a MutatingWebhookConfiguration names by Service at the
Service's ClusterIP; with no kube-proxy and no pod network here, this proxy maps each
``<clusterIP>:<port>`` it is told about to the loopback port the daemon behind the Service listens on.
The webhook configuration stays the chart's (Service reference, ``caBundle``, server name
``<service>.<namespace>.svc``); only the last hop is loopback.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import socketserver
import threading
from pathlib import Path

log = logging.getLogger(__name__)
_HEAD_LIMIT = 8192


def egress_config(socket_path: Path) -> str:
    """kube-apiserver's --egress-selector-config-file: the cluster network through the proxy."""
    return (
        "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n"
        "- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n"
        f"    transport:\n      uds:\n        udsName: {socket_path}\n"
    )


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (dst, src):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        conn: socket.socket = self.request
        head = b""
        while b"\r\n\r\n" not in head and len(head) < _HEAD_LIMIT:
            chunk = conn.recv(1)  # byte by byte: nothing after the head may be swallowed
            if not chunk:
                return
            head += chunk
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        target = parts[1] if len(parts) == 3 and parts[0] == "CONNECT" else ""
        port = self.server.routes.get(target)
        if port is None:
            log.warning("egress: no route for %r", target)
            conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError as err:
            conn.sendall(f"HTTP/1.1 502 Bad Gateway\r\nX-Error: {err.strerror}\r\n\r\n".encode())
            return
        upstream.settimeout(None)
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        back = threading.Thread(target=_pipe, args=(upstream, conn), daemon=True)
        back.start()
        _pipe(conn, upstream)
        back.join(30)
        upstream.close()


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    routes: dict[str, int]


class EgressProxy:
    """The proxy, serving on ``socket_path`` in a thread of this process until ``stop()``."""

    def __init__(self, socket_path: Path) -> None:
        self.path = socket_path
        socket_path.unlink(missing_ok=True)
        self._server = _Server(str(socket_path), _Handler)
        self._server.routes = {}
        self._thread = threading.Thread(target=self._server.serve_forever, name="egress", daemon=True)
        self._thread.start()

    def route(self, target: str, port: int) -> None:
        """Connections to ``target`` (``ip:port``, as kube-apiserver dials it) go to 127.0.0.1:``port``."""
        self._server.routes[target] = port

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.path.unlink(missing_ok=True)
