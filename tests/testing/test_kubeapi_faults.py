"""Injected faults, the request log, the kubeconfig fixture and the standalone command."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from hami.testing.kubeapi import KubeAPIServer
from hami.testing.processes import python_env


@pytest.mark.parametrize(("status", "reason"), [(500, "InternalError"), (503, "ServiceUnavailable"),
                                                (429, "TooManyRequests"), (409, "Conflict")])
def test_status_fault_counts_down(kube_client: client.ApiClient, kube_api: KubeAPIServer,
                                  status: int, reason: str) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_node({"metadata": {"name": "n"}})
    fault = kube_api.faults.add(method="PATCH", path=r"^/api/v1/nodes/n$", status=status, times=2)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            v1.patch_node("n", {"metadata": {"labels": {"a": "1"}}})
        body = json.loads(err.value.body)
        assert (err.value.status, body["kind"], body["reason"], body["code"]) == (status, "Status", reason,
                                                                                  status)
        if status in (429, 503):
            assert err.value.headers["Retry-After"] == "1"
    assert v1.read_node("n").metadata.labels is None  # failed requests changed nothing
    assert v1.patch_node("n", {"metadata": {"labels": {"a": "1"}}}).metadata.labels == {"a": "1"}
    assert (fault.hits, kube_api.faults.pending) == (2, [])
    assert [r.status for r in kube_api.requests.records if r.method == "PATCH"] == [status, status, 200]


def test_fault_matches_method_and_path_only(kube_client: client.ApiClient, kube_api: KubeAPIServer) -> None:
    v1 = client.CoreV1Api(kube_client)
    kube_api.faults.add(method="DELETE", path=r"/pods/", status=500, times=None)
    v1.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {"containers": []}})
    v1.create_node({"metadata": {"name": "n"}})
    v1.delete_node("n")
    for _ in range(3):
        with pytest.raises(ApiException):
            v1.delete_namespaced_pod("p", "default")
    kube_api.faults.clear()
    v1.delete_namespaced_pod("p", "default")


def test_delay_longer_than_client_timeout(kube_client: client.ApiClient, kube_api: KubeAPIServer) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_node({"metadata": {"name": "n"}})
    kube_api.faults.add(method="GET", path=r"^/api/v1/nodes/n$", delay=30.0)
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        v1.read_node("n", _request_timeout=0.2)
    assert v1.read_node("n").metadata.name == "n"  # used up: the next call is served
    # The delayed request is still pending on the server; stop() must interrupt it (fixture teardown).


def test_delay_then_serve(kube_client: client.ApiClient, kube_api: KubeAPIServer) -> None:
    v1 = client.CoreV1Api(kube_client)
    kube_api.faults.add(method="POST", delay=0.05)
    assert v1.create_node({"metadata": {"name": "n"}}).metadata.name == "n"


def test_dropped_watch_stream(kube_client: client.ApiClient, kube_api: KubeAPIServer) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_node({"metadata": {"name": "a"}})
    v1.create_node({"metadata": {"name": "b"}})
    kube_api.faults.add(method="GET", path="/api/v1/nodes", drop_watch=True, after_events=1)
    seen: list[str] = []
    with pytest.raises(urllib3.exceptions.ProtocolError):
        for event in watch.Watch().stream(v1.list_node, timeout_seconds=10):
            seen.append(event["object"].metadata.name)
    assert seen == ["a"]
    assert len(v1.list_node().items) == 2  # drop_watch leaves plain requests alone
    # A cut right away, and one while the stream idles after its last event.
    kube_api.faults.add(drop_watch=True)
    kube_api.faults.add(drop_watch=True, after_events=2)
    for expected in ([], ["a", "b"]):
        seen.clear()
        with pytest.raises(urllib3.exceptions.ProtocolError):
            for event in watch.Watch().stream(v1.list_node, timeout_seconds=30):
                seen.append(event["object"].metadata.name)
        assert seen == expected
    names = [e["object"].metadata.name for e in watch.Watch().stream(v1.list_node, timeout_seconds=1)]
    assert names == ["a", "b"]


def test_fault_needs_an_effect(kube_api: KubeAPIServer) -> None:
    with pytest.raises(ValueError, match="needs a status"):
        kube_api.faults.add(method="GET")


def test_request_log_counts_calls(kube_client: client.ApiClient, kube_api: KubeAPIServer) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_node({"metadata": {"name": "n"}})
    v1.read_node("n")
    v1.list_node(label_selector="a=b")
    before = len(kube_api.requests)
    assert kube_api.requests.count(method="GET") == 2
    assert kube_api.requests.count(method="GET", path=r"^/api/v1/nodes$", labelSelector="a=b") == 1
    assert kube_api.requests.count(method="POST", path="/nodes") == 1
    # An idle stretch makes no calls.
    assert len(kube_api.requests) == before
    kube_api.requests.clear()
    assert kube_api.requests.count() == 0


def test_bad_selector_is_bad_request(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    for kwargs in ({"label_selector": "a in (b"}, {"field_selector": "spec.bogus=1"}):
        with pytest.raises(ApiException) as err:
            v1.list_node(**kwargs)
        assert (err.value.status, json.loads(err.value.body)["reason"]) == (400, "BadRequest")


def test_kube_config_file_fixture(kube_config_file: Path, kube_api: KubeAPIServer) -> None:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kube_config_file), client_configuration=cfg)
    assert cfg.host == kube_api.url
    with client.ApiClient(cfg) as api:
        assert [n.metadata.name for n in client.CoreV1Api(api).list_namespace().items] == [
            "default", "kube-system"]


def test_standalone_command_writes_a_kubeconfig(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kube" / "config"
    argv = [sys.executable, "-m", "hami.testing.kubeapi", "--port", "0", "--kubeconfig", str(kubeconfig)]
    proc = subprocess.Popen(argv, env=python_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed after the kubeconfig is written
        assert line.startswith("kubeapi emulator serving on http://127.0.0.1:")
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        with client.ApiClient(cfg) as api:
            client.CoreV1Api(api).create_node({"metadata": {"name": "n"}})
            assert [n.metadata.name for n in client.CoreV1Api(api).list_node().items] == ["n"]
    finally:
        proc.terminate()
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == 0


def test_wait_helpers(kube_client: client.ApiClient, kube_api: KubeAPIServer) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {"containers": []}})
    kube_api.requests.wait_for(method="POST", path="/pods$")
    with pytest.raises(TimeoutError, match="0 of 1 requests"):
        kube_api.requests.wait_for(method="DELETE", timeout=0.05)

    def bound(pod: dict[str, Any] | None) -> bool:
        return bool(pod and pod["spec"].get("nodeName"))

    with pytest.raises(TimeoutError, match="condition not met"):
        kube_api.store.wait_for("pods", "p", "default", bound, timeout=0.05)
    binder = threading.Thread(target=lambda: v1.create_namespaced_pod_binding(
        "p", "default", {"metadata": {"name": "p"}, "target": {"name": "n"}}, _preload_content=False))
    binder.start()
    pod = kube_api.store.wait_for("pods", "p", "default", bound)
    binder.join(timeout=10)
    assert pod is not None and pod["spec"]["nodeName"] == "n"
    assert kube_api.store.wait_for("pods", "gone", "default", lambda obj: obj is None) is None
