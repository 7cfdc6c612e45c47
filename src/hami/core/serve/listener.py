"""A listening socket that bounds its connections, and the metrics of every listener.

The bound is enforced at ``accept``: a connection beyond it is closed before a byte of it is read
(no TLS handshake, no parsing) and counted, so a flood of connections costs the daemon one
descriptor at a time and shows in ``hami_http_connections_refused_total``. asyncio accepts through
the socket object it is given, so a socket subclass is the one hook every asyncio server keeps.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

DEFAULT_MAX_CONNECTIONS = 512  # Prometheus' own --web.max-connections default


class ConnectionLimit:
    """Open connections of one listener against its bound; refusals counted."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the connection limit must be at least 1, got {limit}")
        self.limit = limit
        self.refused = 0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def open(self) -> int:
        return len(self._open)

    def acquire(self, conn: socket.socket) -> bool:
        with self._lock:
            if len(self._open) >= self.limit:
                self.refused += 1
                return False
            self._open.add(conn)
            return True

    def release(self, conn: socket.socket) -> None:
        with self._lock:
            self._open.discard(conn)

    def shut_all(self) -> None:
        """Shut every open connection down (both ways): whatever waits on one of them (a TLS
        close_notify from a peer that is gone) ends at once."""
        with self._lock:
            conns = list(self._open)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Connection(socket.socket):
    """An accepted connection that gives its slot back when closed (asyncio closes it once)."""

    _limit: ConnectionLimit | None = None

    def close(self) -> None:
        limit, self._limit = self._limit, None
        if limit is not None:
            limit.release(self)
        super().close()


class BoundedListener(socket.socket):
    """A listening socket whose ``accept`` refuses connections beyond ``limit``."""

    limit: ConnectionLimit

    def accept(self) -> tuple[socket.socket, Any]:
        fd, addr = self._accept()  # type: ignore[attr-defined]
        conn = _Connection(self.family, self.type, self.proto, fileno=fd)
        if not self.limit.acquire(conn):
            conn.close()
            # asyncio's accept loop takes this as "nothing more to accept now" and keeps listening
            raise ConnectionAbortedError("connection limit reached")
        conn._limit = self.limit
        return conn, addr


def listen(host: str, port: int, limit: ConnectionLimit, backlog: int) -> BoundedListener:
    """Bind and listen now (so a taken port fails the caller at once); ``::`` is dual stack."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = BoundedListener(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # inherited by every accepted connection: a response's head and body are two writes, and
        # Nagle's algorithm would hold the second for the client's delayed ACK (40 ms)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if family == socket.AF_INET6 and host == "::":
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    sock.limit = limit
    return sock


class ListenerCollector(Collector):
    """``hami_http_*`` for every listener of one registry, read from their limits at scrape time."""

    def __init__(self) -> None:
        self._limits: dict[str, ConnectionLimit] = {}

    def add(self, listener: str, limit: ConnectionLimit) -> None:
        self._limits[listener] = limit

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, CounterMetricFamily]:
        return (
            GaugeMetricFamily(
                "hami_http_open_connections", "Connections open on an HTTP listener.", labels=["listener"]
            ),
            GaugeMetricFamily(
                "hami_http_max_connections",
                "The connection bound of an HTTP listener (--web.max-connections).",
                labels=["listener"],
            ),
            CounterMetricFamily(
                "hami_http_connections_refused",
                "Connections closed unread because the listener was at its bound.",
                labels=["listener"],
            ),
        )

    def collect(self) -> Iterator[Metric]:
        opened, bound, refused = self._families()
        for name, limit in sorted(self._limits.items()):
            opened.add_metric([name], limit.open)
            bound.add_metric([name], limit.limit)
            refused.add_metric([name], limit.refused)
        yield from (opened, bound, refused)

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())


_lock = threading.Lock()
_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, ListenerCollector] = weakref.WeakKeyDictionary()


def listener_metrics(registry: CollectorRegistry) -> ListenerCollector:
    """The one ``ListenerCollector`` of ``registry`` (registered on first use)."""
    with _lock:
        found = _by_registry.get(registry)
        if found is None:
            found = _by_registry[registry] = ListenerCollector()
            registry.register(found)
        return found
