"""One keep-alive HTTP/1.1 connection that sends and receives JSON: far cheaper per request than
``requests``, so that a load generator measures the server, not itself."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit


class Conn:
    def __init__(self, url: str, timeout: float = 60.0) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)

    def call(self, method: str, path: str, body: bytes, content_type: str = "application/json") -> Any:
        """The decoded JSON reply; RuntimeError (with the start of the body) on a status >= 300."""
        self.conn.request(method, path, body=body, headers={"Content-Type": content_type})
        reply = self.conn.getresponse()
        data = reply.read()
        if reply.status >= 300:
            raise RuntimeError(f"{method} {path}: {reply.status} {data[:300]!r}")
        return json.loads(data)

    def close(self) -> None:
        self.conn.close()
