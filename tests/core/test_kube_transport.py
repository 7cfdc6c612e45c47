"""The lean API transport against scripted servers that write exact bytes (framing, keep-alive,
stale connections, broken responses, timeouts, TLS), and through ``raw`` with the real client."""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry

from hami.core.kube import errors, raw
from hami.core.kube.client import new_api_client
from hami.core.kube.options import KubeOptions
from hami.core.kube.transport import HttpTransport, UnsupportedConfiguration
from hami.testing.certs import issue, make_ca
from hami.testing.kubeapi import KubeAPIServer

# A handler gets the connection's reader and socket, and serves as many requests as it likes.
Script = Callable[[Any, socket.socket], None]


def read_request(rfile: Any) -> tuple[str, dict[str, str], bytes]:
    """One request: its request line, headers (lower-case names) and body; ("", {}, b"") at EOF."""
    line = rfile.readline().decode()
    if not line:
        return "", {}, b""
    headers: dict[str, str] = {}
    while (h := rfile.readline().decode()) not in ("\r\n", ""):
        name, _, value = h.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = rfile.read(int(headers.get("content-length", "0")))
    return line.strip(), headers, body


def ok(body: bytes, extra: str = "") -> bytes:
    return (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
            .encode() + body)


class Scripted:
    """A TCP (optionally TLS) server running ``script`` on every accepted connection."""

    def __init__(self, script: Script, tls: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.tls = tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self._threads: list[threading.Thread] = []
        self._open: list[socket.socket] = []
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        # Clients that hang up, or fail the TLS handshake, are part of the tests.
        with contextlib.suppress(OSError):
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            self._open.append(conn)
            with conn, conn.makefile("rb") as rfile:
                self.script(rfile, conn)

    def close(self) -> None:
        for sock in (self.listener, *self._open):  # shutdown, not close, wakes a blocked accept/read
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for thread in self._threads:
            thread.join(5)
        self._acceptor.join(5)


@pytest.fixture
def serve() -> Iterator[Callable[..., Scripted]]:
    servers: list[Scripted] = []

    def start(script: Script, tls: ssl.SSLContext | None = None) -> Scripted:
        server = Scripted(script, tls)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def config(url: str, **settings: Any) -> k8s.Configuration:
    cfg = k8s.Configuration()
    cfg.host = url
    for key, value in settings.items():
        setattr(cfg, key, value)
    return cfg


def test_keep_alive_reuses_one_connection_and_sends_exact_requests(serve: Callable[..., Scripted]) -> None:
    def script(rfile: Any, conn: socket.socket) -> None:
        while True:
            request = read_request(rfile)
            if not request[0]:
                return
            server.requests.append(request)
            conn.sendall(ok(b'{"n":%d}' % len(server.requests)))

    server = serve(script)
    transport = HttpTransport(config(server.url))
    try:
        first = transport.request("PATCH", "/api/v1/nodes/a", {"X-Test": "1"}, b'{"k":1}', 5.0)
        assert (first.status, first.reason, first.read()) == (200, "OK", b'{"n":1}')
        second = transport.request("GET", "/api/v1/nodes", {}, None, 5.0)
        assert second.read() == b'{"n":2}'
    finally:
        transport.close()
    assert server.accepted == 1
    line, headers, body = server.requests[0]
    assert line == "PATCH /api/v1/nodes/a HTTP/1.1"
    assert (headers["host"], headers["x-test"], headers["content-length"], body) == (
        f"127.0.0.1:{server.port}", "1", "7", b'{"k":1}')
    assert server.requests[1][0] == "GET /api/v1/nodes HTTP/1.1"
    assert "content-length" not in server.requests[1][1]


def test_chunked_stream_is_read_as_it_arrives_then_the_connection_is_reused(
    serve: Callable[..., Scripted],
) -> None:
    release = threading.Event()

    def script(rfile: Any, conn: socket.socket) -> None:
        read_request(rfile)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"6;ext=1\r\nline1\n\r\n")
        release.wait(5)  # the client must see line1 before the rest exists
        conn.sendall(b"2\r\nli\r\n4\r\nne2\n\r\n0\r\nX-Trailer: t\r\n\r\n")
        read_request(rfile)
        conn.sendall(ok(b"{}"))

    server = serve(script)
    transport = HttpTransport(config(server.url))
    try:
        response = transport.request("GET", "/watch", {}, None, 5.0)
        lines = raw.iter_lines(response)
        assert next(lines) == b"line1"
        release.set()
        assert list(lines) == [b"line2"]
        assert transport.request("GET", "/again", {}, None, 5.0).read() == b"{}"
    finally:
        transport.close()
    assert server.accepted == 1


def test_connection_close_and_read_to_eof_bodies_are_not_pooled(serve: Callable[..., Scripted]) -> None:
    replies = iter([ok(b"a", "Connection: close\r\n"), b"HTTP/1.0 200 OK\r\n\r\nuntil-eof", ok(b"c")])

    def script(rfile: Any, conn: socket.socket) -> None:
        read_request(rfile)
        conn.sendall(next(replies))

    server = serve(script)
    transport = HttpTransport(config(server.url))
    try:
        assert [transport.request("GET", "/", {}, None, 5.0).read() for _ in range(3)] == [
            b"a", b"until-eof", b"c"]
    finally:
        transport.close()
    assert server.accepted == 3


def test_an_idle_connection_the_server_closed_is_replaced(serve: Callable[..., Scripted]) -> None:
    def script(rfile: Any, conn: socket.socket) -> None:
        read_request(rfile)
        conn.sendall(ok(b"{}"))  # keep-alive promised, then the server hangs up while idle

    server = serve(script)
    transport = HttpTransport(config(server.url))
    try:
        assert transport.request("GET", "/", {}, None, 5.0).read() == b"{}"
        server._threads[0].join(5)  # the script returned: that connection is closed
        assert transport.request("GET", "/", {}, None, 5.0).read() == b"{}"
    finally:
        transport.close()
    assert server.accepted == 2


@pytest.mark.parametrize(("reply", "error"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", http.client.IncompleteRead),
    (b"SPDY/9 what\r\n\r\n", http.client.BadStatusLine),
    (b"", http.client.RemoteDisconnected),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", http.client.BadStatusLine),
])
def test_broken_responses_raise_and_drop_the_connection(
    serve: Callable[..., Scripted], reply: bytes, error: type[Exception],
) -> None:
    def script(rfile: Any, conn: socket.socket) -> None:
        read_request(rfile)
        conn.sendall(reply)

    server = serve(script)
    transport = HttpTransport(config(server.url))
    try:
        with pytest.raises(error):
            transport.request("GET", "/", {}, None, 5.0).read()
        assert transport._idle == []
    finally:
        transport.close()


HEAD = b"HTTP/1.1 201 Created\r\nContent-Length: 4\r\nX-Dup: a\r\nx-dup: b\r\n\r\n"


@pytest.mark.parametrize("parts", [
    [HEAD + b'{"a"', b":1}"],  # the whole head in the first read
    [HEAD[:20], HEAD[20:] + b'{"a":1}'],  # split: read line by line
    [HEAD.replace(b"\r\n", b"\n") + b'{"a":1}\r\n\r\n'],  # bare LF lines, a CRLF CRLF in the body
], ids=["buffered", "split", "bare-lf"])
def test_a_response_head_parses_the_same_however_it_arrives(
    serve: Callable[..., Scripted], parts: list[bytes],
) -> None:
    def script(rfile: Any, conn: socket.socket) -> None:
        read_request(rfile)
        for part in parts:
            conn.sendall(part)
            time.sleep(0.05)

    transport = HttpTransport(config(serve(script).url))
    try:
        response = transport.request("GET", "/", {}, None, 5.0)
        assert (response.status, response.reason) == (201, "Created")
        assert response.headers == {"content-length": "4", "x-dup": "a, b"}
        assert response.read() == b'{"a"'
    finally:
        transport.close()


@pytest.mark.parametrize("split", [False, True], ids=["buffered", "split"])
def test_a_response_with_too_many_headers_is_refused(serve: Callable[..., Scripted], split: bool) -> None:
    head = b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"Content-Length: 0\r\n\r\n"

    def script(rfile: Any, conn: socket.socket) -> None:
        read_request(rfile)
        for part in (head[:10], head[10:]) if split else (head,):
            conn.sendall(part)
            time.sleep(0.05)

    transport = HttpTransport(config(serve(script).url))
    try:
        with pytest.raises(http.client.LineTooLong):
            transport.request("GET", "/", {}, None, 5.0)
        assert transport._idle == []
    finally:
        transport.close()


def test_broken_and_silent_servers_become_typed_transport_errors(serve: Callable[..., Scripted]) -> None:
    stop = threading.Event()

    def silent(rfile: Any, conn: socket.socket) -> None:
        read_request(rfile)
        stop.wait(10)

    def garbage(rfile: Any, conn: socket.socket) -> None:
        read_request(rfile)
        conn.sendall(b"garbage\r\n\r\n")

    registry = CollectorRegistry()
    slow = new_api_client(KubeOptions(host=serve(silent).url, qps=-1, timeout=0.3), registry=registry)
    broken = new_api_client(KubeOptions(host=serve(garbage).url, qps=-1), registry=registry)
    try:
        with pytest.raises(errors.TransportError) as timed_out:
            raw.request_json(slow, "GET", "/api/v1/nodes")
        assert timed_out.value.reason == "Timeout"
        with pytest.raises(errors.TransportError) as bad:
            raw.request_json(broken, "GET", "/api/v1/nodes")
        assert bad.value.reason == "ConnectionError"
    finally:
        stop.set()
        slow.close()
        broken.close()
    assert registry.get_sample_value("rest_client_requests_total", {
        "code": "<error>", "method": "GET", "host": slow.configuration.host.removeprefix("http://")}) == 1


def test_raw_sends_auth_user_agent_and_base_path(serve: Callable[..., Scripted]) -> None:
    def script(rfile: Any, conn: socket.socket) -> None:
        server.requests.append(read_request(rfile))
        conn.sendall(ok(b'{"kind":"Node"}'))

    server = serve(script)
    cfg = config(server.url + "/k8s/clusters/c1", api_key={"authorization": "Bearer s3cret"})
    api = new_api_client(KubeOptions(qps=-1, user_agent="hami-test/2"), registry=CollectorRegistry(),
                         configuration=cfg)
    try:
        assert raw.request_json(api, "POST", "/api/v1/nodes", body={"a": [1, "x"]}) == {"kind": "Node"}
    finally:
        api.close()
    line, headers, body = server.requests[0]
    assert line == "POST /k8s/clusters/c1/api/v1/nodes HTTP/1.1"
    assert headers["authorization"] == "Bearer s3cret"
    assert headers["user-agent"] == "hami-test/2"
    assert headers["content-type"] == "application/json"
    assert body == b'{"a":[1,"x"]}'


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    ca = make_ca()
    other = make_ca("someone-else")
    paths = {"ca": ca.write(tmp_path / "ca.pem"), "other": other.write(tmp_path / "other.pem")}
    for name in ("server", "client"):
        paths[name], paths[f"{name}-key"] = tmp_path / f"{name}.pem", tmp_path / f"{name}-key.pem"
        issue(ca, name, paths[name], paths[f"{name}-key"])
    return paths


def _tls_server(serve: Callable[..., Scripted], pki: dict[str, Path], *, client_cert: bool) -> Scripted:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki["server"], pki["server-key"])
    if client_cert:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(pki["ca"])

    def script(rfile: Any, conn: socket.socket) -> None:
        while read_request(rfile)[0]:
            conn.sendall(ok(b'{"tls":true}'))

    return serve(script, ctx)


def test_tls_verifies_the_server_and_presents_the_client_certificate(
    serve: Callable[..., Scripted], pki: dict[str, Path],
) -> None:
    server = _tls_server(serve, pki, client_cert=True)
    good = HttpTransport(config(server.url, ssl_ca_cert=str(pki["ca"]), cert_file=str(pki["client"]),
                                key_file=str(pki["client-key"])))
    try:
        assert good.request("GET", "/", {}, None, 5.0).read() == b'{"tls":true}'
        assert good.request("GET", "/", {}, None, 5.0).read() == b'{"tls":true}'
    finally:
        good.close()
    assert server.accepted == 1
    untrusted = HttpTransport(config(server.url, ssl_ca_cert=str(pki["other"])))
    with pytest.raises(ssl.SSLCertVerificationError):
        untrusted.request("GET", "/", {}, None, 5.0)


def test_tls_without_verification_and_with_another_server_name(
    serve: Callable[..., Scripted], pki: dict[str, Path],
) -> None:
    server = _tls_server(serve, pki, client_cert=False)
    insecure = HttpTransport(config(server.url, verify_ssl=False))
    assert insecure.request("GET", "/", {}, None, 5.0).read() == b'{"tls":true}'
    insecure.close()
    # The certificate names localhost and 127.0.0.1, not this name.
    renamed = HttpTransport(config(server.url, ssl_ca_cert=str(pki["ca"]), tls_server_name="api.invalid"))
    with pytest.raises(ssl.SSLCertVerificationError):
        renamed.request("GET", "/", {}, None, 5.0)
    named = HttpTransport(config(server.url, ssl_ca_cert=str(pki["ca"]), tls_server_name="localhost"))
    assert named.request("GET", "/", {}, None, 5.0).read() == b'{"tls":true}'
    named.close()


def test_a_proxied_configuration_falls_back_to_the_generated_client(kube_api: KubeAPIServer) -> None:
    # The emulator answers absolute-form requests too, so it can stand in as the forward proxy.
    kube_api.store.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    with pytest.raises(UnsupportedConfiguration):
        HttpTransport(config(kube_api.url, proxy=kube_api.url))
    api = new_api_client(KubeOptions(qps=-1), registry=CollectorRegistry(),
                         configuration=config("http://apiserver.invalid:6443", proxy=kube_api.url))
    try:
        assert api.rest_client.transport is None
        assert raw.request_json(api, "GET", "/api/v1/nodes/n1")["metadata"]["name"] == "n1"
    finally:
        api.close()
    assert kube_api.requests.count("GET", "/api/v1/nodes/n1") == 1
