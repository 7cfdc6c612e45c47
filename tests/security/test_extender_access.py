"""Who may call the extender: only kube-scheduler's certificate reaches /filter and /bind, the API
server still reaches /webhook, and the metrics port takes the web config every daemon takes."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import bcrypt
import pytest
import requests

from hami.scheduler.extender.daemon import Extender
from hami.scheduler.extender.main import build_parser, options
from hami.testing.certs import TlsFiles
from hami.testing.kubeapi import KubeAPIServer

MakeExtender = Callable[..., AbstractContextManager[Extender]]
BIND = {"PodName": "victim", "PodNamespace": "default", "PodUID": "u1", "Node": "n1"}
REVIEW = {
    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
    "request": {"uid": "r1", "namespace": "default", "object": {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }},
}


def victim_pod(kube_api: KubeAPIServer) -> None:
    kube_api.store.put({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "victim", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    })


def test_without_kube_schedulers_certificate_nobody_binds_or_filters(
    tls: TlsFiles, make_extender: MakeExtender, kube_api: KubeAPIServer
) -> None:
    victim_pod(kube_api)
    with make_extender(cert_file=str(tls.cert), key_file=str(tls.key), client_ca_file=str(tls.ca),
                       webhook_bind="127.0.0.1:0") as ext:
        assert ext.http is not None
        filter_args = {"Pod": kube_api.store.get("pods", "victim", "default"), "NodeNames": ["n1"]}
        for cert in (None, (str(tls.rogue_cert), str(tls.rogue_key))):
            for path, body in (("/bind", BIND), ("/filter", filter_args)):
                with pytest.raises((requests.exceptions.SSLError, requests.exceptions.ConnectionError)):
                    requests.post(ext.http.url + path, json=body, cert=cert, verify=str(tls.ca), timeout=5)
        pod = kube_api.store.get("pods", "victim", "default")
        assert pod is not None
        assert pod["spec"].get("nodeName") is None and not pod["metadata"].get("annotations")
        scheduler = (str(tls.client_cert), str(tls.client_key))
        r = requests.post(ext.http.url + "/bind", json=BIND, cert=scheduler, verify=str(tls.ca), timeout=10)
        assert r.status_code == 200  # kube-scheduler's own certificate gets in
        # the webhook has its own listener: TLS, no client certificate (the API server has none)
        assert ext.webhook_server is not None
        w = requests.post(ext.webhook_server.url + "/webhook", json=REVIEW, verify=str(tls.ca), timeout=10)
        assert w.status_code == 200 and w.json()["response"]["allowed"] is True
        assert requests.post(ext.http.url + "/webhook", json=REVIEW, cert=scheduler, verify=str(tls.ca),
                             timeout=10).status_code == 404
        assert requests.post(ext.webhook_server.url + "/bind", json=BIND, verify=str(tls.ca),
                             timeout=10).status_code == 404


def test_the_schedulers_metrics_port_takes_the_web_config(
    tmp_path: Path, tls: TlsFiles, kube_api: KubeAPIServer, make_extender: MakeExtender
) -> None:
    hashed = bcrypt.hashpw(b"scrape", bcrypt.gensalt(rounds=4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(json.dumps({
        "tls_server_config": {"cert_file": str(tls.cert), "key_file": str(tls.key)},
        "basic_auth_users": {"prometheus": hashed},
    }), encoding="utf-8")
    args = build_parser().parse_args([
        "--web.config.file", str(web), "--metrics-bind-address", "127.0.0.1:0",
        "--http_bind", "127.0.0.1:0", "--web.max-connections", "64",
    ])
    opts = options(args)
    with make_extender(web_config_file=opts.web_config_file, max_connections=opts.max_connections) as ext:
        assert ext.metrics_server is not None and ext.metrics_server.url.startswith("https://")
        url, ca = ext.metrics_server.url, str(tls.ca)
        assert requests.get(url + "/metrics", verify=ca, timeout=5).status_code == 401
        assert requests.get(url + "/healthz", verify=ca, timeout=5).status_code == 200  # probes stay open
        scraped = requests.get(url + "/metrics", verify=ca, auth=("prometheus", "scrape"), timeout=10)
        assert scraped.status_code == 200
        assert 'hami_http_max_connections{listener="hami-scheduler"} 64.0' in scraped.text
