"""The emulator as the real `kubectl` sees it: OpenAPI v3 and server-side field validation for
`apply`, server-side Table output for `get`, `logs` from the log directory; and the same
documents over plain HTTP."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from hami.testing.kubeapi import KubeAPIServer
from hami.testing.kubeapi.logs import log_path

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[KubeAPIServer]:
    with KubeAPIServer(log_dir=tmp_path / "logs") as server:
        yield server


def _kubectl(
    api: KubeAPIServer, tmp_path: Path, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(api.kubeconfig()), encoding="utf-8")
    env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(tmp_path)}
    return subprocess.run(
        ["kubectl", *args], input=stdin, capture_output=True, text=True, timeout=60, env=env, check=False
    )


def _pod(name: str, containers: tuple[str, ...] = ("main",), **meta: object) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system", **meta},
        "spec": {"nodeName": "n1", "containers": [{"name": c, "image": "img"} for c in containers]},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.7",
            "containerStatuses": [{"name": c, "ready": True, "restartCount": 2} for c in containers],
        },
    }


@needs_kubectl
def test_apply_validates_on_the_server(api: KubeAPIServer, tmp_path: Path) -> None:
    good = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        },
    }
    done = _kubectl(api, tmp_path, "apply", "-f", "-", stdin=yaml.safe_dump(good))
    assert done.returncode == 0 and "deployment.apps/d created" in done.stdout, done.stderr
    unknown = {**good, "metadata": {"name": "e", "namespace": "default"}, "bogus": 1}
    done = _kubectl(api, tmp_path, "apply", "-f", "-", stdin=yaml.safe_dump(unknown))
    assert done.returncode != 0 and 'strict decoding error: unknown field "bogus"' in done.stderr
    wrong = {
        **good,
        "metadata": {"name": "f", "namespace": "default"},
        "spec": {**good["spec"], "replicas": "two"},
    }
    done = _kubectl(api, tmp_path, "apply", "-f", "-", stdin=yaml.safe_dump(wrong))
    assert done.returncode != 0 and 'The Deployment "f" is invalid: spec.replicas' in done.stderr
    assert api.store.get("deployments.apps", "e", "default") is None
    assert api.store.get("deployments.apps", "f", "default") is None
    # --validate=false skips it, as against a real server
    done = _kubectl(api, tmp_path, "apply", "--validate=false", "-f", "-", stdin=yaml.safe_dump(unknown))
    assert done.returncode == 0, done.stderr


@needs_kubectl
def test_get_prints_the_servers_columns(api: KubeAPIServer, tmp_path: Path) -> None:
    done = _kubectl(api, tmp_path, "get", "nodes")
    assert done.stderr.strip() == "No resources found"  # nodes are not namespaced
    api.store.put(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/gpu": ""}},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"kubeletVersion": "v1.31.4"},
            },
        }
    )
    api.store.put(_pod("p1", ("a", "b"), labels={"app": "x"}))
    done = _kubectl(api, tmp_path, "get", "nodes")
    assert done.stdout.split("\n")[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert done.stdout.split("\n")[1].split()[:3] == ["n1", "Ready", "gpu"]
    done = _kubectl(
        api, tmp_path, "get", "pods", "-n", "kube-system", "-l", "app=x", "-o", "wide", "-L", "app"
    )
    header, row = done.stdout.splitlines()[:2]
    assert header.split()[:6] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP"]
    assert row.split()[:4] == ["p1", "2/2", "Running", "4"] and "10.0.0.7" in row and row.split()[-1] == "x"


@needs_kubectl
def test_logs_reads_the_log_directory(api: KubeAPIServer, tmp_path: Path) -> None:
    assert api.log_dir is not None
    api.store.put(
        _pod(
            "p1",
            ("kube-scheduler", "extender"),
            annotations={"kubectl.kubernetes.io/default-container": "extender"},
        )
    )
    path = log_path(api.log_dir, "kube-system", "p1", "extender")
    path.parent.mkdir(parents=True)
    path.write_text("one\ntwo FilteringFailed\nthree\n", encoding="utf-8")
    done = _kubectl(api, tmp_path, "logs", "p1", "-n", "kube-system", "--tail=2")
    assert done.stdout == "two FilteringFailed\nthree\n", done.stderr
    done = _kubectl(api, tmp_path, "logs", "p1", "-n", "kube-system", "-c", "kube-scheduler")
    assert done.returncode == 0 and done.stdout == ""
    done = _kubectl(api, tmp_path, "logs", "p1", "-n", "kube-system", "-c", "nope")
    assert done.returncode != 0 and "container nope is not valid for pod p1" in done.stderr


def test_table_and_logs_over_http(api: KubeAPIServer) -> None:
    api.store.put(_pod("p1", ("a", "b")))
    table = requests.get(
        f"{api.url}/api/v1/namespaces/kube-system/pods", headers={"Accept": TABLE}, timeout=5
    ).json()
    assert table["kind"] == "Table" and [c["name"] for c in table["columnDefinitions"]][:3] == [
        "Name",
        "Ready",
        "Status",
    ]
    (row,) = table["rows"]
    assert row["cells"][:3] == ["p1", "2/2", "Running"] and row["object"]["kind"] == "PartialObjectMetadata"
    full = requests.get(
        f"{api.url}/api/v1/namespaces/kube-system/pods/p1?includeObject=Object",
        headers={"Accept": TABLE},
        timeout=5,
    ).json()
    assert full["rows"][0]["object"]["spec"]["containers"][0]["name"] == "a"
    plain = requests.get(f"{api.url}/api/v1/namespaces/kube-system/pods", timeout=5).json()
    assert plain["kind"] == "PodList"
    # a pod with two containers needs one named, as the API server says
    reply = requests.get(f"{api.url}/api/v1/namespaces/kube-system/pods/p1/log", timeout=5)
    assert reply.status_code == 400 and "choose one of: [a b]" in reply.json()["message"]
    reply = requests.get(
        f"{api.url}/api/v1/namespaces/kube-system/pods/p1/log?container=a&tailLines=x", timeout=5
    )
    assert reply.status_code == 400
    reply = requests.get(f"{api.url}/api/v1/namespaces/kube-system/pods/p1/log?container=a", timeout=5)
    assert reply.status_code == 200 and reply.headers["Content-Type"] == "text/plain" and reply.text == ""
    assert (
        requests.put(f"{api.url}/api/v1/namespaces/kube-system/pods/p1/log", data="{}", timeout=5).status_code
        == 405
    )


def test_openapi_v3_offers_field_validation_for_every_type(api: KubeAPIServer) -> None:
    root = requests.get(f"{api.url}/openapi/v3", timeout=5).json()
    assert {"api/v1", "apis/apps/v1", "apis/rbac.authorization.k8s.io/v1"} <= set(root["paths"])
    doc = requests.get(api.url + root["paths"]["apis/apps/v1"]["serverRelativeURL"], timeout=5).json()
    patch = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "apps",
        "version": "v1",
        "kind": "Deployment",
    }
    assert any(p["name"] == "fieldValidation" and p["in"] == "query" for p in patch["parameters"])
    schemas = doc["components"]["schemas"]
    assert "io.k8s.api.apps.v1.Deployment" in schemas and "io.k8s.api.core.v1.PodSpec" in schemas
    refs = json.dumps(schemas)
    assert "$defs" not in refs and '"#/components/schemas/' in refs
    assert requests.get(f"{api.url}/openapi/v3/apis/nope/v1", timeout=5).status_code == 404


def test_strict_field_validation_on_create_update_and_patch(api: KubeAPIServer) -> None:
    base = f"{api.url}/api/v1/namespaces/default/configmaps"
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}
    assert requests.post(f"{base}?fieldValidation=Strict", json=cm, timeout=5).status_code == 201
    bad = requests.post(
        f"{base}?fieldValidation=Strict", json={**cm, "metadata": {"name": "d"}, "extra": 1}, timeout=5
    )
    assert bad.status_code == 400 and bad.json()["message"] == 'strict decoding error: unknown field "extra"'
    typed = requests.put(f"{base}/c?fieldValidation=Strict", json={**cm, "data": {"a": 1}}, timeout=5)
    assert typed.status_code == 422 and typed.json()["reason"] == "Invalid"
    patched = requests.patch(
        f"{base}/c?fieldValidation=Strict",
        data=json.dumps({"spec": {"x": 1}}),
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=5,
    )
    assert patched.status_code == 400 and "unknown field" in patched.json()["message"]
    # without the parameter (the official Python client, the daemons) nothing is checked
    assert (
        requests.post(base, json={**cm, "metadata": {"name": "e"}, "extra": 1}, timeout=5).status_code == 201
    )
    assert api.store.get("configmaps", "c", "default")["data"] == {"a": "b"}  # type: ignore[index]
