"""Slow, idle and flooding clients of every listener: none of them may keep others or the probes out."""

from __future__ import annotations

import base64
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, suppress
from pathlib import Path

import bcrypt
import pytest
import requests
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from hami.core.serve import WebConfig, guard, serve_metrics, serve_wsgi
from hami.core.serve import server as serving
from hami.core.serve.server import Server
from hami.core.serve.webconfig import TLSConfig
from hami.scheduler.extender.daemon import Extender
from hami.testing.certs import TlsFiles as Tls

SLOW_HEAD = b"GET /healthz HTTP/1.1\r\nHost: attacker\r\nX-Slow: "  # and never the end of the head


def connections(server: Server, count: int, first_bytes: bytes = b"") -> list[socket.socket]:
    """``count`` TCP connections to ``server``, each having sent ``first_bytes`` and nothing more."""
    out = []
    for _ in range(count):
        sock = socket.create_connection((server.host, server.port), timeout=5)
        if first_bytes:
            sock.sendall(first_bytes)
        out.append(sock)
    return out


def healthz(server: Server, tls: Tls | None = None, timeout: float = 3.0) -> int:
    verify: str | bool = str(tls.ca) if tls is not None else True
    return requests.get(f"{server.url}/healthz", timeout=timeout, verify=verify).status_code


@pytest.fixture
def attackers() -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    yield socks
    for sock in socks:
        sock.close()


def tls_metrics(tls: Tls) -> Server:
    config = WebConfig(tls=TLSConfig(cert_file=str(tls.cert), key_file=str(tls.key)))
    return serve_metrics("127.0.0.1:0", CollectorRegistry(), web_config=config)


def test_idle_connections_to_a_tls_listener_do_not_stop_it_answering(
    tls: Tls, attackers: list[socket.socket]
) -> None:
    with tls_metrics(tls) as server:
        attackers += connections(server, 4)  # TCP up, no ClientHello ever
        assert healthz(server, tls) == 200  # within healthz's 3 s timeout: a handshake stall was 10 s


def test_idle_connections_to_the_extenders_tls_listener_do_not_stop_it(
    tls: Tls, make_extender: Callable[..., AbstractContextManager[Extender]], attackers: list[socket.socket]
) -> None:
    with make_extender(cert_file=str(tls.cert), key_file=str(tls.key)) as ext:
        assert ext.http is not None
        attackers += connections(ext.http, 4)
        assert healthz(ext.http, tls) == 200


@pytest.mark.parametrize("listener", ["http", "metrics_server"])
def test_slow_request_heads_do_not_stall_the_extender_or_its_probes(
    extender: Extender, attackers: list[socket.socket], listener: str
) -> None:
    server = getattr(extender, listener)
    attackers += connections(server, 64, SLOW_HEAD)  # more than any thread pool here
    time.sleep(0.5)  # let the server take them all in
    for _ in range(3):
        assert healthz(server) == 200


def test_a_listener_bounds_its_connections_and_counts_refusals(
    monkeypatch: pytest.MonkeyPatch, attackers: list[socket.socket]
) -> None:
    # Hypercorn notices a peer's close at its next timer only: the slots come back within it
    monkeypatch.setattr(serving, "IDLE_TIMEOUT_S", 1.0)
    registry = CollectorRegistry()
    with serve_metrics("127.0.0.1:0", registry, name="bounded", max_connections=8) as server:
        attackers += connections(server, 8)
        time.sleep(0.3)
        refused = socket.create_connection((server.host, server.port), timeout=5)
        refused.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        with suppress(ConnectionResetError):  # closed unread: an end of file, or a reset
            assert refused.recv(100) == b""
        refused.close()
        for sock in attackers:
            sock.close()
        attackers.clear()

        def count() -> float:
            text = requests.get(f"{server.url}/metrics", timeout=3).text
            found = {
                s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.labels.get("listener") == "bounded"
            }
            return found["hami_http_connections_refused_total"]

        deadline = time.monotonic() + 5
        while True:
            try:
                assert count() >= 1
                break
            except requests.RequestException:
                assert time.monotonic() < deadline
                time.sleep(0.1)


def test_an_idle_connection_is_closed_after_the_idle_timeout(
    monkeypatch: pytest.MonkeyPatch, attackers: list[socket.socket]
) -> None:
    monkeypatch.setattr(serving, "IDLE_TIMEOUT_S", 1.0)
    with serve_metrics("127.0.0.1:0", CollectorRegistry()) as server:
        attackers += connections(server, 1, SLOW_HEAD)
        attackers[0].settimeout(5)  # far past the 1 s idle timeout: a recv that times out fails the test
        assert attackers[0].recv(100) == b""


def test_a_body_that_never_arrives_is_answered_408(
    monkeypatch: pytest.MonkeyPatch, extender: Extender, attackers: list[socket.socket]
) -> None:
    monkeypatch.setattr(guard, "BODY_TIMEOUT_S", 1.0)
    assert extender.http is not None
    attackers += connections(
        extender.http, 1, b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"Pod\":"
    )
    attackers[0].settimeout(5)
    assert attackers[0].recv(200).startswith(b"HTTP/1.1 408")
    assert healthz(extender.http) == 200


def test_a_password_longer_than_72_bytes_is_a_401(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=4)).decode()
    config_file = tmp_path / "web.yml"
    config_file.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n", encoding="utf-8")
    with serve_metrics("127.0.0.1:0", CollectorRegistry(), web_config_file=str(config_file)) as server:
        for password in ("x" * 73, "secret" + "x" * 100, "é" * 40):
            token = base64.b64encode(f"prometheus:{password}".encode()).decode()
            r = requests.get(f"{server.url}/metrics", headers={"Authorization": f"Basic {token}"}, timeout=5)
            assert r.status_code == 401
        good = requests.get(f"{server.url}/metrics", auth=("prometheus", "secret"), timeout=5)
        assert good.status_code == 200


def test_tls_handshake_that_stalls_midway_is_cut(tls: Tls, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving, "HANDSHAKE_TIMEOUT_S", 1.0)
    with tls_metrics(tls) as server:
        raw = socket.create_connection((server.host, server.port), timeout=5)
        raw.sendall(b"\x16\x03\x01\x00\xff")  # a ClientHello record header, then silence
        with suppress(ConnectionResetError):  # cut within the 5 s socket timeout, not left to hang
            assert raw.recv(100) == b""
        raw.close()
        assert healthz(server, tls) == 200
        ctx = ssl.create_default_context(cafile=str(tls.ca))
        with socket.create_connection((server.host, server.port), timeout=5) as sock, \
                ctx.wrap_socket(sock, server_hostname="localhost") as conn:
            assert conn.version() in ("TLSv1.2", "TLSv1.3")


def test_clients_that_never_read_their_responses_hold_no_worker(attackers: list[socket.socket]) -> None:
    big = b"x" * (8 << 20)  # far more than the socket buffers take

    def app(environ: dict[str, object], start_response: Callable[..., object]) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [big if environ["PATH_INFO"] == "/big" else b"ok\n"]

    with serve_wsgi("127.0.0.1:0", app, threads=2) as server:
        attackers += connections(server, 4, b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")  # and never read
        time.sleep(0.5)
        assert healthz(server) == 200
