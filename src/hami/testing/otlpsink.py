"""An HTTP endpoint that answers every OTLP/HTTP export with 200 and counts what it got.

Not a trace backend (tests/integration runs Jaeger, ``hami.demo.jaeger``): bench_extender.py's
``--tracing-rounds`` measures the extender's CPU with every span exported, and a backend on the same
cores would take its share of them.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


class OtlpSink:
    """``with OtlpSink() as sink``: ``sink.url`` takes OTLP/HTTP exports; ``sink.received`` bytes."""

    def __init__(self) -> None:
        self.received = 0
        self.requests = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                sink.received += len(self.rfile.read(length))
                sink.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpSink:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
