"""The one kubelet endpoint `kubectl logs` reaches: kube-apiserver answers ``pods/NAME/log`` by
calling ``GET https://<node address>:<kubelet port>/containerLogs/NS/POD/CONTAINER`` on the pod's
node. With no kubelet here, this HTTPS server answers it from files laid out as the emulator reads
them (``<log_dir>/<NS>_<POD>/<CONTAINER>.log``: the logs of the processes standing in for the
pods' containers), with the emulator's ``tailLines`` and ``limitBytes`` handling. The nodes name
it in ``status.daemonEndpoints.kubeletEndpoint.port``; kube-apiserver reaches it through the egress
proxy (no kubelet client certificate is asked for: loopback only)."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from hami.testing.kubeapi import logs


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if len(parts) != 4 or parts[0] != "containerLogs":
            self.send_error(404)
            return
        _, namespace, pod, container = parts
        query = {**dict(parse_qsl(url.query)), "container": container}
        spec = {"containers": [{"name": container}]}
        stub = {"metadata": {"namespace": namespace, "name": pod}, "spec": spec}
        body = logs.read(stub, query, self.server.log_dir)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # quiet: tests read their own output
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    log_dir: Path


class KubeletLogs:
    """Serves until ``stop()``, on 127.0.0.1 at ``port``, with ``cert``/``key``."""

    def __init__(self, log_dir: Path, cert: Path, key: Path) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.log_dir = log_dir
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="kubelet-logs", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
