"""The limited, instrumented ApiClient against the API emulator over real HTTP."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import urllib3
import yaml
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry

from hami.core import klog
from hami.core.kube import errors, raw
from hami.core.kube.client import new_api_client
from hami.core.kube.options import KubeOptions
from hami.testing.builders import pod
from hami.testing.kubeapi import KubeAPIServer
from tests.core.clock import FakeClock


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def _requests(registry: CollectorRegistry, host: str, code: str, method: str) -> float:
    value = registry.get_sample_value(
        "rest_client_requests_total", {"code": code, "method": method, "host": host})
    return value or 0.0


def test_requests_are_counted_by_code_and_method(
    kube_api: KubeAPIServer, registry: CollectorRegistry
) -> None:
    kube_api.store.put(pod(name="p1"))
    api = new_api_client(KubeOptions(host=kube_api.url, qps=-1), registry=registry)
    v1 = k8s.CoreV1Api(api)
    host = kube_api.url.removeprefix("http://")
    try:
        assert [p.metadata.name for p in v1.list_namespaced_pod("default").items] == ["p1"]
        with pytest.raises(k8s.ApiException) as missing:
            v1.read_namespaced_pod("nope", "default")
        assert missing.value.status == 404
        with pytest.raises(errors.Conflict):
            raw.request_json(api, "POST", "/api/v1/namespaces/default/pods", body=pod(name="p1"))
        kube_api.faults.add(method="GET", path="/pods/p1$", status=500)
        with pytest.raises(errors.ApiError) as failed:
            raw.request_json(api, "GET", "/api/v1/namespaces/default/pods/p1")
        assert failed.value.status == 500
        assert raw.request_json(api, "GET", "/api/v1/namespaces/default/pods/p1")["metadata"]["name"] == "p1"
    finally:
        api.close()
    assert _requests(registry, host, "200", "GET") == 2
    assert _requests(registry, host, "404", "GET") == 1
    assert _requests(registry, host, "409", "POST") == 1
    assert _requests(registry, host, "500", "GET") == 1
    assert registry.get_sample_value(
        "rest_client_request_duration_seconds_count", {"verb": "GET", "host": host}) == 4
    # One HTTP request per call: urllib3's retries are off, so a 500 is not silently repeated.
    assert kube_api.requests.count("GET", "/pods/p1$") == 2


def test_limiter_throttles_every_request_and_is_measured(
    kube_api: KubeAPIServer, registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(advance_on_sleep=True)
    api = new_api_client(KubeOptions(host=kube_api.url, qps=2, burst=1), registry=registry, clock=clock)
    host = kube_api.url.removeprefix("http://")
    v1 = k8s.CoreV1Api(api)
    previous = klog.verbosity()
    klog.set_verbosity(3)  # client-go logs waits over 50 ms at -v=3
    try:
        with caplog.at_level(logging.INFO, logger="hami.core.kube.client"):
            v1.list_node()
            v1.list_namespaced_pod("default")
            raw.request_json(api, "GET", "/api/v1/nodes")
    finally:
        klog.set_verbosity(previous)
        api.close()
    # Burst 1 at 2 QPS: the first request is free, each later one waits half a second.
    assert clock.slept == pytest.approx([0.5, 0.5])
    labels = {"verb": "GET", "host": host}
    assert registry.get_sample_value("rest_client_rate_limiter_duration_seconds_count", labels) == 3
    assert registry.get_sample_value("rest_client_rate_limiter_duration_seconds_sum", labels) == \
        pytest.approx(1.0)
    assert registry.get_sample_value(
        "rest_client_rate_limiter_duration_seconds_bucket", {**labels, "le": "0.005"}) == 1
    # The request latency includes the wait (measured on the same clock, which HTTP does not move).
    assert registry.get_sample_value("rest_client_request_duration_seconds_sum", labels) == \
        pytest.approx(1.0)
    throttled = [r.getMessage() for r in caplog.records if "client-side throttling" in r.getMessage()]
    assert throttled == [
        f"Waited for 500ms due to client-side throttling, not priority and fairness, "
        f"request: GET:{kube_api.url}/api/v1/namespaces/default/pods",
        f"Waited for 500ms due to client-side throttling, not priority and fairness, "
        f"request: GET:{kube_api.url}/api/v1/nodes",
    ]


def test_default_timeout_applies_to_typed_calls_and_is_counted(
    kube_api: KubeAPIServer, registry: CollectorRegistry
) -> None:
    kube_api.store.put(pod(name="slow"))
    kube_api.faults.add(method="GET", path="/pods/slow$", delay=3.0)
    api = new_api_client(KubeOptions(host=kube_api.url, timeout=0.3), registry=registry)
    host = kube_api.url.removeprefix("http://")
    try:
        with pytest.raises(urllib3.exceptions.HTTPError) as caught:
            k8s.CoreV1Api(api).read_namespaced_pod("slow", "default")  # no per-call timeout given
        assert errors.is_timeout(caught.value)
        # The same failure through the raw helpers is a typed TransportError.
        kube_api.faults.add(method="GET", path="/pods/slow$", delay=3.0)
        with pytest.raises(errors.TransportError) as typed:
            raw.request_json(api, "GET", "/api/v1/namespaces/default/pods/slow")
        assert typed.value.reason == "Timeout"
    finally:
        api.close()
    assert _requests(registry, host, "<error>", "GET") == 2
    assert _requests(registry, host, "200", "GET") == 0


def test_kubeconfig_from_environment_reaches_the_server(
    kube_api: KubeAPIServer, registry: CollectorRegistry, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kube_api.kubeconfig()), encoding="utf-8")
    monkeypatch.setenv("KUBECONFIG", str(path))
    kube_api.store.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    api = new_api_client(KubeOptions(), registry=registry)
    try:
        assert [n.metadata.name for n in k8s.CoreV1Api(api).list_node().items] == ["n1"]
    finally:
        api.close()



def test_token_refresh_before_each_request_keeps_the_proxy_chosen_at_start(
    kube_api: KubeAPIServer, registry: CollectorRegistry, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The kubeconfig loader's refresh hook re-assigns the host before every request; that must
    # not re-read the proxy environment each time (it scans all of os.environ, per request).
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kube_api.kubeconfig()), encoding="utf-8")
    kube_api.store.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    monkeypatch.delenv("http_proxy", raising=False)
    api = new_api_client(KubeOptions(kubeconfig=str(path)), registry=registry)
    try:
        assert api.configuration.refresh_api_key_hook is not None
        assert api.configuration.proxy is None
        monkeypatch.setenv("http_proxy", "http://proxy.invalid:3128")
        assert raw.request_json(api, "GET", "/api/v1/nodes/n1")["metadata"]["name"] == "n1"
        assert api.configuration.proxy is None
        assert api.configuration.host == kube_api.url
        api.configuration.host = "http://127.0.0.1:1"  # a different host is still taken
        assert api.configuration.proxy == "http://proxy.invalid:3128"
    finally:
        api.close()
