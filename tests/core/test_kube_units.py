"""Kubernetes-access pieces that need no API server: errors, config loading, metrics, helpers."""

from __future__ import annotations

from pathlib import Path

import pytest
import urllib3
import yaml
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry

from hami.core.kube import errors, raw
from hami.core.kube.client import KubeConfigError, _go_duration, new_api_client
from hami.core.kube.informer import Backoff
from hami.core.kube.options import KubeOptions
from hami.testing.processes import free_port


def _status(code: int, reason: str, message: str) -> bytes:
    return yaml.safe_dump(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
         "reason": reason, "message": message}, default_flow_style=True
    ).encode()


@pytest.mark.parametrize(
    ("status", "cls"),
    [(404, errors.NotFound), (409, errors.Conflict), (410, errors.Gone), (500, errors.ApiError)],
)
def test_status_bodies_become_typed_errors(status: int, cls: type[errors.ApiError]) -> None:
    err = errors.from_status(status, b'{"kind":"Status","reason":"Why","message":"what happened"}')
    assert type(err) is cls
    assert (err.status, err.reason, err.message) == (status, "Why", "what happened")
    assert str(err) == f"{status} Why: what happened"


def test_non_json_error_body_is_kept_as_message() -> None:
    err = errors.from_status(502, b"<html>bad gateway</html>", "Bad Gateway")
    assert (err.status, err.reason, err.message) == (502, "Bad Gateway", "<html>bad gateway</html>")


def test_api_exception_is_translated() -> None:
    exc = k8s.ApiException(status=409, reason="Conflict")
    exc.body = '{"reason":"Conflict","message":"the object has been modified"}'
    err = errors.from_exception(exc)
    assert isinstance(err, errors.Conflict)
    assert err.message == "the object has been modified"


def test_transport_errors_have_status_zero() -> None:
    pool = urllib3.HTTPConnectionPool("127.0.0.1", 1)
    timeout = urllib3.exceptions.MaxRetryError(
        pool, "/", urllib3.exceptions.ReadTimeoutError(pool, "/", "Read timed out."))
    refused = urllib3.exceptions.MaxRetryError(
        pool, "/", urllib3.exceptions.NewConnectionError(pool, "refused"))
    assert (errors.from_exception(timeout).status, errors.from_exception(timeout).reason) == (0, "Timeout")
    assert isinstance(errors.from_exception(refused), errors.TransportError)
    assert errors.from_exception(refused).reason == "ConnectionError"


def test_connection_refused_is_counted_as_error_code() -> None:
    registry = CollectorRegistry()
    host = f"127.0.0.1:{free_port()}"
    api = new_api_client(KubeOptions(host=f"http://{host}"), registry=registry)
    try:
        with pytest.raises(errors.TransportError) as caught:
            raw.request_json(api, "GET", "/api/v1/nodes")
        assert caught.value.reason == "ConnectionError"
        with pytest.raises(urllib3.exceptions.HTTPError):
            k8s.CoreV1Api(api).list_node()
    finally:
        api.close()
    labels = {"code": "<error>", "method": "GET", "host": host}
    assert registry.get_sample_value("rest_client_requests_total", labels) == 2
    assert registry.get_sample_value(
        "rest_client_request_duration_seconds_count", {"verb": "GET", "host": host}) == 2


@pytest.mark.parametrize(
    ("qps", "burst", "gauges", "limited"),
    [(5.0, 10, (5.0, 10.0), True), (0.0, 0, (5.0, 10.0), True), (-1.0, 10, (-1.0, 10.0), False)],
)
def test_configured_limits_are_exported(
    qps: float, burst: int, gauges: tuple[float, float], limited: bool
) -> None:
    registry = CollectorRegistry()
    api = new_api_client(KubeOptions(host="http://127.0.0.1:1", qps=qps, burst=burst), registry=registry)
    try:
        assert (registry.get_sample_value("hami_kube_client_qps"),
                registry.get_sample_value("hami_kube_client_burst")) == gauges
        assert (api.rest_client.limiter is not None) is limited
    finally:
        api.close()


def test_two_clients_share_one_registry() -> None:
    registry = CollectorRegistry()
    first = new_api_client(KubeOptions(host="http://127.0.0.1:1"), registry=registry)
    second = new_api_client(KubeOptions(host="http://127.0.0.1:2"), registry=registry)
    assert first.rest_client.metrics is second.rest_client.metrics
    first.close()
    second.close()


def test_kubeconfig_file_is_loaded(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "s3cret"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }), encoding="utf-8")
    api = new_api_client(KubeOptions(kubeconfig=str(path), user_agent="hami-test/1"),
                         registry=CollectorRegistry())
    try:
        assert api.configuration.host == "http://127.0.0.1:6443"
        _, url, headers, _, _ = api.param_serialize("GET", "/api/v1/nodes", auth_settings=["BearerToken"])
        assert url == "http://127.0.0.1:6443/api/v1/nodes"
        assert {k.lower(): v for k, v in headers.items()}["authorization"] == "Bearer s3cret"
        assert api.user_agent == "hami-test/1"
    finally:
        api.close()


def test_no_configuration_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KubeConfigError, match="--kubeconfig or \\$KUBECONFIG"):
        new_api_client(KubeOptions(), registry=CollectorRegistry())


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.0625, "62ms"), (1.5, "1.5s"), (2.0, "2s"), (1.2345, "1.234s")]
)
def test_throttle_log_durations_read_like_go(seconds: float, text: str) -> None:
    assert _go_duration(seconds) == text


def test_backoff_doubles_up_to_the_cap_and_resets() -> None:
    backoff = Backoff(initial=1.0, maximum=5.0, jitter=0.0)
    assert [backoff.next() for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    backoff.reset()
    assert backoff.next() == 1.0
    jittered = Backoff(initial=1.0, maximum=100.0, jitter=1.0)
    assert all(1.0 <= jittered.next() < 2.0 for _ in range(1))


def test_resource_paths() -> None:
    assert raw.resource_path("", "v1", "pods", "ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert raw.resource_path("coordination.k8s.io", "v1", "leases") == "/apis/coordination.k8s.io/v1/leases"
