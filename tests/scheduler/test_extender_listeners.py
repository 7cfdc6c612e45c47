"""The extender's two listeners as the chart runs them: /filter, /bind (and pprof with --profiling)
on a mutual-TLS listener that only kube-scheduler's client certificate opens (--client-ca-file),
and /webhook alone on a TLS listener the API server reaches without one (--webhook-bind)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from hami.scheduler.extender.daemon import Extender
from hami.scheduler.extender.main import build_parser, options
from hami.testing import certs
from hami.testing.extender import running
from hami.testing.kubeapi import KubeAPIServer

REVIEW = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {"uid": "u1", "object": {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}},
}


@pytest.fixture
def tls(tmp_path: Path) -> dict[str, Path]:
    ca = certs.make_ca()
    paths = {"ca": ca.write(tmp_path / "ca.crt")}
    for name in ("server", "client"):
        paths[f"{name}.crt"], paths[f"{name}.key"] = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
        certs.issue(ca, name, paths[f"{name}.crt"], paths[f"{name}.key"])
    return paths


@pytest.fixture
def ext(kube_api: KubeAPIServer, tls: dict[str, Path]) -> Iterator[Extender]:
    with running(
        kube_api,
        cert_file=str(tls["server.crt"]),
        key_file=str(tls["server.key"]),
        client_ca_file=str(tls["ca"]),
        webhook_bind="127.0.0.1:0",
        profiling=True,
    ) as extender:
        yield extender


def test_filter_needs_the_client_certificate(ext: Extender, tls: dict[str, Path]) -> None:
    assert ext.http is not None
    body = {"Pod": {"metadata": {"name": "p", "namespace": "default"}, "spec": {}}, "NodeNames": []}
    # Refused in the handshake (TLS 1.2) or right after it (TLS 1.3 checks the client's certificate
    # once the client thinks it is done): SSLError or a closed connection, both ConnectionErrors.
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.post(f"{ext.http.url}/filter", json=body, verify=str(tls["ca"]), timeout=10)
    client = (str(tls["client.crt"]), str(tls["client.key"]))
    answer = requests.post(
        f"{ext.http.url}/filter", json=body, cert=client, verify=str(tls["ca"]), timeout=10
    )
    assert answer.status_code == 200 and "Error" in answer.json()
    # pprof is behind the same certificate
    index = requests.get(f"{ext.http.url}/debug/pprof/", cert=client, verify=str(tls["ca"]), timeout=10)
    assert index.status_code == 200 and "goroutine" in index.text
    # and the webhook is not served here any more
    assert (
        requests.post(
            f"{ext.http.url}/webhook", json=REVIEW, cert=client, verify=str(tls["ca"]), timeout=10
        ).status_code
        == 404
    )


def test_webhook_listener_serves_only_the_webhook_without_client_certificates(
    ext: Extender, tls: dict[str, Path]
) -> None:
    assert ext.webhook_server is not None
    base = ext.webhook_server.url
    assert base.startswith("https://")
    answer = requests.post(f"{base}/webhook", json=REVIEW, verify=str(tls["ca"]), timeout=10)
    assert answer.status_code == 200 and answer.json()["response"]["uid"] == "u1"
    for path in ("/filter", "/bind", "/debug/pprof/"):
        reply = requests.request(
            "POST" if path != "/debug/pprof/" else "GET",
            base + path,
            json={},
            verify=str(tls["ca"]),
            timeout=10,
        )
        assert reply.status_code in (404, 405), path


def test_client_ca_without_tls_is_refused_with_a_clear_message(tls: dict[str, Path]) -> None:
    args = build_parser().parse_args(["--client-ca-file", str(tls["ca"])])
    with pytest.raises(ValueError, match="--client-ca-file needs --cert_file and --key_file"):
        options(args)
