"""Malformed list items and watch lines: counted, skipped, and the informer keeps serving.

The emulator never sends garbage, so a scripted HTTP server plays an API server that does.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from hami.core.kube.client import new_api_client
from hami.core.kube.informer import Informer
from hami.core.kube.options import KubeOptions
from hami.testing.wait import wait_until

LIST = {
    "kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"},
    "items": [{"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "4"}}, {"spec": {}}],
}
WATCH_LINES = [
    b"this is not json",
    json.dumps({"type": "ADDED", "object": {"metadata": {"name": "b", "namespace": "ns",
                                                          "resourceVersion": "6"}}}).encode(),
    json.dumps({"type": "SURPRISE", "object": {"metadata": {"name": "c"}}}).encode(),
    json.dumps({"type": "ADDED", "object": "not an object"}).encode(),
    json.dumps({"type": "ADDED", "object": {"metadata": {"name": "d", "namespace": "ns",
                                                          "resourceVersion": "7"}}}).encode(),
]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.paths.append(self.path)
        if "watch=true" not in self.path:
            data = json.dumps(LIST).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        if len([p for p in self.server.paths if "watch=true" in p]) == 1:
            for line in WATCH_LINES:
                self.wfile.write(b"%x\r\n%s\n\r\n" % (len(line) + 1, line))
                self.wfile.flush()
        self.server.done.wait(10)  # later watches stay open and quiet until the server stops
        self.wfile.write(b"0\r\n\r\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.paths: list[str] = []
        self.done = threading.Event()


@pytest.fixture
def scripted() -> Iterator[_Server]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.done.set()
    server.shutdown()
    server.server_close()
    thread.join(10)


def test_bad_items_and_lines_are_skipped_and_counted(scripted: _Server) -> None:
    registry = CollectorRegistry()
    api = new_api_client(KubeOptions(host=f"http://127.0.0.1:{scripted.server_address[1]}", qps=-1),
                         registry=registry)
    informer = Informer(api, ("", "v1", "pods"), backoff_initial=0.05)
    try:
        informer.start()
        assert informer.wait_for_sync(10)
        wait_until(lambda: informer.get("ns/d"), 10, "the event after the bad lines applied")
        assert sorted(o["metadata"]["name"] for o in informer.list()) == ["a", "b", "d"]
        assert informer.last_resource_version() == "7"
        # one nameless list item + three unusable watch lines
        assert registry.get_sample_value(
            "hami_kube_watch_errors_total", {"resource": "pods", "reason": "decode"}) == 4
        assert "resourceVersion=5&" in next(p for p in scripted.paths if "watch=true" in p)
    finally:
        informer.stop()
        api.close()
