"""List + watch through `kubernetes.watch.Watch`: initial state, resume, 410, bookmarks, selectors."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest
import requests
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from hami.testing.kubeapi import KubeAPIServer


def _collect(stream: Any, until: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
    """Read events until `until(events)` holds or the stream ends (always bounded by timeoutSeconds)."""
    events: list[dict[str, Any]] = []
    for event in stream:
        events.append(event)
        if until(events):
            break
    return events


def _summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["raw_object"]["metadata"].get("name", "")) for e in events]


def test_watch_without_rv_starts_with_current_state_then_changes(
    kube_client: client.ApiClient, kube_api: KubeAPIServer
) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_node({"metadata": {"name": "a"}})
    w = watch.Watch()
    stream = w.stream(v1.list_node, timeout_seconds=10)
    first = next(stream)
    assert (first["type"], first["object"].metadata.name) == ("ADDED", "a")

    def writer() -> None:
        kube_api.requests.wait_for(method="GET", path="/api/v1/nodes", watch="true")
        v1.create_node({"metadata": {"name": "b"}})
        v1.patch_node("a", {"metadata": {"labels": {"x": "1"}}})
        v1.delete_node("b")

    thread = threading.Thread(target=writer)
    thread.start()
    events = _collect(stream, lambda ev: len(ev) == 3)
    w.stop()
    thread.join(timeout=10)
    assert _summary(events) == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert events[1]["object"].metadata.labels == {"x": "1"}


def test_list_then_watch_resumes_from_list_resource_version(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_namespaced_pod("default", {"metadata": {"name": "old"}, "spec": {"containers": []}})
    listed = v1.list_namespaced_pod("default")
    v1.create_namespaced_pod("default", {"metadata": {"name": "new"}, "spec": {"containers": []}})
    v1.patch_namespaced_pod("old", "default", {"metadata": {"labels": {"a": "b"}}})
    events = _collect(
        watch.Watch().stream(v1.list_namespaced_pod, "default",
                             resource_version=listed.metadata.resource_version, timeout_seconds=1),
        lambda ev: len(ev) == 2)
    assert _summary(events) == [("ADDED", "new"), ("MODIFIED", "old")]
    # Resuming from the rv of the last event replays nothing more.
    last_rv = events[-1]["object"].metadata.resource_version
    more = list(watch.Watch().stream(v1.list_namespaced_pod, "default", resource_version=last_rv,
                                     timeout_seconds=1))
    assert more == []


def test_too_old_resource_version_gets_410_expired(kube_client: client.ApiClient) -> None:
    with KubeAPIServer(history=3) as small:
        config = client.Configuration()
        config.host = small.url
        with client.ApiClient(config) as api:
            v1 = client.CoreV1Api(api)
            rv = v1.create_node({"metadata": {"name": "n"}}).metadata.resource_version
            for i in range(5):
                v1.patch_node("n", {"metadata": {"labels": {"i": str(i)}}})
            with pytest.raises(ApiException) as err:
                # timeout_seconds disables the client's single retry, so the 410 surfaces as is.
                list(watch.Watch().stream(v1.list_node, resource_version=rv, timeout_seconds=5))
            assert err.value.status == 410
            assert "Expired: too old resource version" in str(err.value.reason)
            raw = v1.list_node(watch=True, resource_version=rv, timeout_seconds=5, _preload_content=False)
            assert raw.status == 200  # the real API reports expiry inside the stream
            error = json.loads(raw.data.splitlines()[0])
            assert error["type"] == "ERROR"
            assert error["object"] == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                       "status": "Failure", "reason": "Expired", "code": 410,
                                       "message": error["object"]["message"]}


def test_compact_expires_every_older_resource_version(kube_client: client.ApiClient,
                                                      kube_api: KubeAPIServer) -> None:
    v1 = client.CoreV1Api(kube_client)
    rv = v1.create_node({"metadata": {"name": "n"}}).metadata.resource_version
    v1.patch_node("n", {"metadata": {"labels": {"a": "1"}}})
    kube_api.store.compact()
    with pytest.raises(ApiException) as err:
        list(watch.Watch().stream(v1.list_node, resource_version=rv, timeout_seconds=5))
    assert err.value.status == 410
    current = v1.list_node().metadata.resource_version
    assert list(watch.Watch().stream(v1.list_node, resource_version=current, timeout_seconds=1)) == []


def test_timeout_seconds_ends_the_stream(kube_client: client.ApiClient, kube_api: KubeAPIServer) -> None:
    v1 = client.CoreV1Api(kube_client)
    rv = v1.list_node().metadata.resource_version
    assert list(watch.Watch().stream(v1.list_node, resource_version=rv, timeout_seconds=1)) == []
    assert kube_api.requests.count(path="/api/v1/nodes", watch="true", timeoutSeconds="1") == 1


def test_bookmarks_carry_the_current_resource_version(kube_client: client.ApiClient) -> None:
    with KubeAPIServer(bookmark_interval=0.05) as server:
        config = client.Configuration()
        config.host = server.url
        with client.ApiClient(config) as api:
            v1 = client.CoreV1Api(api)
            v1.create_node({"metadata": {"name": "n"}})
            rv = v1.list_node().metadata.resource_version
            server.store.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
            w = watch.Watch()
            events = _collect(w.stream(v1.list_node, resource_version=rv, allow_watch_bookmarks=True,
                                       timeout_seconds=10), lambda ev: ev[-1]["type"] == "BOOKMARK")
            w.stop()
            assert [e["type"] for e in events] == ["BOOKMARK"]
            assert int(events[0]["raw_object"]["metadata"]["resourceVersion"]) == int(rv) + 1
            assert w.resource_version == str(int(rv) + 1)


def test_send_initial_events_ends_with_marked_bookmark(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_node({"metadata": {"name": "n"}})
    events = _collect(watch.Watch().stream(v1.list_node, send_initial_events=True,
                                           resource_version_match="NotOlderThan", resource_version="",
                                           allow_watch_bookmarks=True, timeout_seconds=5),
                      lambda ev: ev[-1]["type"] == "BOOKMARK")
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[1]["raw_object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_selector_watch_sees_objects_enter_and_leave(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_namespaced_pod("default", {"metadata": {"name": "p", "labels": {"gpu": "no"}},
                                         "spec": {"containers": []}})
    v1.create_namespaced_pod("default", {"metadata": {"name": "q", "labels": {"gpu": "yes"}},
                                         "spec": {"containers": []}})
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    v1.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"gpu": "yes"}}})   # enters
    v1.patch_namespaced_pod("q", "default", {"metadata": {"labels": {"gpu": "gone"}}})  # leaves
    v1.patch_namespaced_pod("q", "default", {"metadata": {"labels": {"other": "1"}}})   # unseen
    v1.create_namespaced_pod("kube-system", {"metadata": {"name": "r", "labels": {"gpu": "yes"}},
                                             "spec": {"containers": []}})  # other namespace
    events = list(watch.Watch().stream(v1.list_namespaced_pod, "default", label_selector="gpu=yes",
                                       resource_version=rv, timeout_seconds=1))
    assert _summary(events) == [("ADDED", "p"), ("DELETED", "q")]


def test_field_selector_watch_on_node_name(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    rv = v1.list_pod_for_all_namespaces().metadata.resource_version
    for name in ("a", "b"):
        v1.create_namespaced_pod("default", {"metadata": {"name": name}, "spec": {"containers": []}})
    v1.create_namespaced_pod_binding("a", "default", {"metadata": {"name": "a"}, "target": {"name": "gpu-1"}},
                                     _preload_content=False)
    events = list(watch.Watch().stream(v1.list_pod_for_all_namespaces, field_selector="spec.nodeName=gpu-1",
                                       resource_version=rv, timeout_seconds=1))
    assert _summary(events) == [("ADDED", "a")]
    unscheduled = v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=")
    assert [p.metadata.name for p in unscheduled.items] == ["b"]


def test_server_stop_ends_watches_cleanly() -> None:
    server = KubeAPIServer().start()
    config = client.Configuration()
    config.host = server.url
    with client.ApiClient(config) as api:
        v1 = client.CoreV1Api(api)
        rv = v1.list_node().metadata.resource_version
        outcome: list[Any] = []

        def run() -> None:
            try:
                outcome.append(list(watch.Watch().stream(v1.list_node, resource_version=rv,
                                                         timeout_seconds=60)))
            except Exception as exc:  # recorded so the assertion below names it
                outcome.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        server.requests.wait_for(watch="true")
        server.stop()
        thread.join(timeout=10)
        assert not thread.is_alive()
        assert outcome == [[]]  # a clean end of stream: no events, no protocol error


def test_history_keeps_each_version_as_written(kube_api: KubeAPIServer) -> None:
    """A replayed event shows the object as it was written: no write changes a stored object in
    place, whichever parts of it the write leaves alone. Each HTTP write follows a `store.put`,
    whose object nothing has encoded yet, so a write that changed it would show in the replay."""
    http = requests.Session()
    pods = f"{kube_api.url}/api/v1/namespaces/default/pods"
    pod = f"{pods}/p"
    rv = http.get(pods, timeout=5).json()["metadata"]["resourceVersion"]
    written: list[dict[str, Any]] = []

    def put(step: int) -> None:
        base: dict[str, Any] = written[-1] if written else {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}
        labels = {**base["metadata"].get("labels", {}), "step": str(step)}
        written.append(kube_api.store.put({**base, "metadata": {**base["metadata"], "labels": labels}}))

    def check(reply: requests.Response) -> None:
        assert reply.status_code in (200, 201), reply.text
        written.append(reply.json() if reply.json()["kind"] == "Pod" else http.get(pod, timeout=5).json())

    def patch(url: str, body: Any, content_type: str) -> requests.Response:
        return http.patch(url, data=json.dumps(body), headers={"Content-Type": content_type}, timeout=5)

    writes: list[Callable[[], requests.Response]] = [
        lambda: patch(pod, {"spec": {"activeDeadlineSeconds": 5}}, "application/merge-patch+json"),
        lambda: patch(f"{pod}/status", {"status": {"phase": "Running"}}, "application/merge-patch+json"),
        lambda: patch(pod, [{"op": "add", "path": "/spec/priority", "value": 2}],
                      "application/json-patch+json"),
        lambda: patch(pod, {"spec": {"containers": [{"name": "c", "image": "y"}]}},
                      "application/strategic-merge-patch+json"),
        lambda: http.post(f"{pod}/binding", json={"metadata": {"name": "p"}, "target": {"name": "n1"}},
                          timeout=5),
        lambda: http.put(pod, json={**written[-1], "metadata": {**written[-1]["metadata"], "labels": {}}},
                         timeout=5),
        lambda: http.delete(pod, timeout=5),
    ]
    for step, write in enumerate(writes):
        put(step)
        check(write())

    stream = http.get(pods, params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "1"}, timeout=10)
    events = [json.loads(line) for line in stream.text.splitlines()]
    assert [e["type"] for e in events] == ["ADDED"] + ["MODIFIED"] * 12 + ["DELETED"]
    assert [e["object"] for e in events] == written
    versions = [int(obj["metadata"]["resourceVersion"]) for obj in written]
    assert versions == sorted(set(versions))


def _chunked_lines(body: bytes) -> tuple[list[bytes], bytes]:
    """The lines in the complete chunks of `body`, and what is left of it."""
    lines: list[bytes] = []
    while b"\r\n" in body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if len(rest) < size + 2:
            break
        lines += rest[:size].splitlines()
        body = rest[size + 2:]
    return lines, body


def test_a_watch_that_does_not_read_holds_up_no_write(kube_api: KubeAPIServer) -> None:
    """Writers hand a watch what its socket takes without blocking; the watch's own thread writes
    the rest once the client reads again, in order and complete."""
    http = requests.Session()
    nodes = f"{kube_api.url}/api/v1/nodes"
    rv = http.get(nodes, timeout=5).json()["metadata"]["resourceVersion"]
    with socket.socket() as stalled:
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
        stalled.settimeout(10)
        stalled.connect((kube_api.host, kube_api.port))
        stalled.sendall(f"GET /api/v1/nodes?watch=1&resourceVersion={rv} HTTP/1.1\r\n\r\n".encode())
        kube_api.requests.wait_for(path="/api/v1/nodes$", watch="1")
        big = "x" * 100_000  # 100 writes of this are far more than the socket buffers hold
        for i in range(100):
            node = {"metadata": {"name": "n", "annotations": {"big": big, "i": str(i)}}}
            reply = (http.put(f"{nodes}/n", json=node, timeout=5) if i
                     else http.post(nodes, json=node, timeout=5))
            assert reply.status_code in (200, 201), reply.text
        received = b""
        while b"\r\n\r\n" not in received:
            received += stalled.recv(65536)
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"Transfer-Encoding: chunked" in head
        lines: list[bytes] = []
        while len(lines) < 100:
            chunk = stalled.recv(1 << 20)
            assert chunk, "the watch ended early"
            more, body = _chunked_lines(body + chunk)
            lines += more
    events = [json.loads(line) for line in lines]
    assert [e["type"] for e in events] == ["ADDED"] + ["MODIFIED"] * 99
    assert [e["object"]["metadata"]["annotations"]["i"] for e in events] == [str(i) for i in range(100)]
