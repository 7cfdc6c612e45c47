"""The emulator's HTTP/1.1 layer over a raw socket: keep-alive, framing, refused requests."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
import requests

from hami.testing.kubeapi import KubeAPIServer


@pytest.fixture
def conn(kube_api: KubeAPIServer) -> Iterator[socket.socket]:
    with socket.create_connection((kube_api.host, kube_api.port), timeout=5) as sock:
        yield sock


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


def read_reply(sock: socket.socket, buffer: bytearray) -> Reply:
    """One response with a Content-Length body, from `buffer` and then the socket."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed mid-response: {bytes(buffer)!r}"
        buffer += chunk
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (f.partition(":") for f in fields)}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        rest += chunk
    buffer[:] = rest[length:]
    return Reply(int(status_line.split()[1]), headers, rest[:length])


def closed(sock: socket.socket) -> bool:
    return sock.recv(1) == b""


def test_keep_alive_serves_pipelined_requests_in_order(conn: socket.socket, kube_api: KubeAPIServer) -> None:
    body = json.dumps({"metadata": {"name": "n"}}).encode()
    conn.sendall(b"POST /api/v1/nodes HTTP/1.1\r\nHost: x\r\ncontent-TYPE: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                 + b"GET /api/v1/nodes/n HTTP/1.1\r\nHost: x\r\n\r\n"
                 + b"GET /api/v1/nodes/missing HTTP/1.1\r\nHost: x\r\n\r\n")
    buffer = bytearray()
    created, got, missing = (read_reply(conn, buffer) for _ in range(3))
    assert (created.status, got.status, missing.status) == (201, 200, 404)
    assert json.loads(got.body) == json.loads(created.body)
    assert json.loads(missing.body)["reason"] == "NotFound"
    assert got.headers["content-type"] == "application/json" and "date" in got.headers
    assert "connection" not in got.headers
    assert [r.content_type for r in kube_api.requests.records] == ["application/json", "", ""]


@pytest.mark.parametrize("request_line, extra", [
    (b"GET /version HTTP/1.1", b"Connection: close\r\n"),
    (b"GET /version HTTP/1.0", b""),
])
def test_connection_close_and_http10_end_the_connection(conn: socket.socket, request_line: bytes,
                                                        extra: bytes) -> None:
    conn.sendall(request_line + b"\r\nHost: x\r\n" + extra + b"\r\n")
    reply = read_reply(conn, bytearray())
    assert reply.status == 200 and json.loads(reply.body)["gitVersion"] == "v1.31.0"
    assert reply.headers["connection"] == "close"
    assert closed(conn)


def test_http10_keep_alive_stays_open(conn: socket.socket) -> None:
    buffer = bytearray()
    for _ in range(2):
        conn.sendall(b"GET /version HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert read_reply(conn, buffer).status == 200


def test_absolute_form_and_fragments_name_the_same_resource(conn: socket.socket,
                                                            kube_api: KubeAPIServer) -> None:
    kube_api.store.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"a": "1"}}})
    conn.sendall(b"GET http://apiserver.invalid:6443/api/v1/nodes?labelSelector=a%3D1 HTTP/1.1\r\n\r\n"
                 b"GET /api/v1/nodes/n#status HTTP/1.1\r\n\r\n")
    buffer = bytearray()
    listed, got = read_reply(conn, buffer), read_reply(conn, buffer)
    assert [item["metadata"]["name"] for item in json.loads(listed.body)["items"]] == ["n"]
    assert json.loads(got.body)["metadata"]["name"] == "n"
    assert [(r.path, r.query) for r in kube_api.requests.records] == [
        ("/api/v1/nodes", {"labelSelector": "a=1"}), ("/api/v1/nodes/n", {})]


def test_empty_lines_between_requests_are_ignored(conn: socket.socket) -> None:
    conn.sendall(b"\r\nGET /version HTTP/1.1\r\n\r\n\r\nGET /version HTTP/1.1\r\n\r\n")
    buffer = bytearray()
    assert [read_reply(conn, buffer).status for _ in range(2)] == [200, 200]


def test_expect_100_continue_gets_the_interim_reply(conn: socket.socket) -> None:
    body = json.dumps({"metadata": {"name": "n"}}).encode()
    conn.sendall(b"POST /api/v1/nodes HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
                 % len(body))
    assert conn.recv(25) == b"HTTP/1.1 100 Continue\r\n\r\n"
    conn.sendall(body)
    assert read_reply(conn, bytearray()).status == 201


@pytest.mark.parametrize("raw, status", [
    (b"NONSENSE\r\n\r\n", 400),
    (b"GET /" + b"x" * 70000 + b" HTTP/1.1\r\n\r\n", 414),
    (b"GET /version SPDY/3\r\n\r\n", 400),
    (b"GET /version HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400),
    (b"POST /api/v1/nodes HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411),
    (b"OPTIONS /version HTTP/1.1\r\n\r\n", 501),
    (b"GET /version HTTP/1.1\r\n" + b"X-Many: 1\r\n" * 101 + b"\r\n", 431),
])
def test_unreadable_requests_are_refused_and_the_connection_closed(
    conn: socket.socket, kube_api: KubeAPIServer, raw: bytes, status: int
) -> None:
    conn.sendall(raw)
    reply = read_reply(conn, bytearray())
    assert reply.status == status
    assert json.loads(reply.body)["code"] == status
    assert reply.headers["connection"] == "close"
    assert closed(conn)
    assert len(kube_api.requests) == 0  # never reached the API, so not in the request log


def test_root_lists_the_paths_as_a_kube_apiserver_does(kube_api: KubeAPIServer) -> None:
    """``/`` answers ``{"paths": [...]}``, and every path listed answers too."""
    got = requests.get(kube_api.url + "/", timeout=10)
    assert got.status_code == 200
    paths = got.json()["paths"]
    assert {"/api", "/api/v1", "/apis", "/version", "/healthz", "/openapi/v3"} <= set(paths)
    assert paths == sorted(paths) and any(p.startswith("/apis/apps/") for p in paths)
    for path in paths:
        assert requests.get(kube_api.url + path, timeout=10).status_code == 200, path
