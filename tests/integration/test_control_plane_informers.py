"""The informers (``hami.core.kube.informer``, every daemon's list+watch cache) against a real
kube-apiserver and etcd: an etcd compaction and a kube-apiserver restart end their watch with
410 Gone ("too old resource version"); they relist and lose no pod. A control plane of its own:
restarting the shared one would cost the chart's kube-scheduler its Lease."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client import CollectorRegistry

from hami.core.kube.client import new_api_client
from hami.core.kube.informer import Informer
from hami.core.kube.options import KubeOptions
from hami.testing import builders
from hami.testing.controlplane import Binaries, ControlPlane
from hami.testing.wait import wait_until

# bounded waits of a few minutes each on a loaded 2-core machine, beyond the default 300 s
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
Obj = dict[str, Any]
WAIT_S = 180.0  # generous for a loaded 2-core machine
NS = "default"


@pytest.fixture(scope="module")
def own_control_plane(
    tmp_path_factory: pytest.TempPathFactory, control_plane_binaries: Binaries
) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("cp-informers"), binaries=control_plane_binaries) as cp:
        yield cp


def etcd(cp: ControlPlane, call: str, body: Obj) -> Obj:
    """One call of etcd's v3 JSON gateway (``/v3/kv/put``, ``/v3/kv/compaction``)."""
    reply = requests.post(f"{cp.etcd_url}/v3/{call}", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    result: Obj = reply.json()
    return result


def compact_etcd(cp: ControlPlane) -> int:
    """A write that no kube-apiserver sees (etcd's revision moves past every resourceVersion a
    client holds), then a physical compaction at that revision; the revision."""
    key = base64.b64encode(b"/hami-test/compaction").decode()
    put = etcd(cp, "kv/put", {"key": key, "value": base64.b64encode(b"x").decode()})
    revision = int(put["header"]["revision"])
    etcd(cp, "kv/compaction", {"revision": revision, "physical": True})
    return revision


def pod_names(cp: ControlPlane) -> dict[str, str]:
    with cp.session() as s:
        reply = s.get(f"{cp.url}/api/v1/namespaces/{NS}/pods", timeout=30)
    reply.raise_for_status()
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in reply.json()["items"]}


def create_pod(cp: ControlPlane, name: str) -> None:
    pod = builders.pod({"name": "main", "image": "busybox"}, name=name, namespace=NS)
    pod.pop("status")
    with cp.session() as s:
        reply = s.post(f"{cp.url}/api/v1/namespaces/{NS}/pods", json=pod, timeout=30)
    assert reply.status_code == 201, reply.text


def delete_pod(cp: ControlPlane, name: str) -> None:
    with cp.session() as s:
        reply = s.delete(f"{cp.url}/api/v1/namespaces/{NS}/pods/{name}", json={"gracePeriodSeconds": 0},
                         timeout=30)  # fmt: skip
    assert reply.status_code == 200, reply.text


def gone_count(registry: CollectorRegistry) -> float:
    value = registry.get_sample_value("hami_kube_watch_errors_total", {"resource": "pods", "reason": "gone"})
    return value or 0.0


def test_informers_relist_after_compaction_and_an_apiserver_restart_and_lose_no_pod(
    own_control_plane: ControlPlane, tmp_path: Path
) -> None:
    cp = own_control_plane
    registry = CollectorRegistry()
    api = new_api_client(KubeOptions(kubeconfig=str(cp.kubeconfig), qps=-1, timeout=30.0), registry=registry)
    informer = Informer(api, ("", "v1", "pods"), namespace=NS, registry=registry, backoff_max=2.0)
    added: list[str] = []
    deleted: list[str] = []
    informer.add_handler(lambda p: added.append(p["metadata"]["name"]), None,
                         lambda p: deleted.append(p["metadata"]["name"]))  # fmt: skip
    for name in ("keep", "doomed"):
        create_pod(cp, name)
    informer.start()
    try:

        def cached() -> dict[str, str]:
            return {p["metadata"]["name"]: p["metadata"]["uid"] for p in informer.list()}

        wait_until(lambda: cached() == pod_names(cp), WAIT_S, "the informer synced", interval=0.2)
        held = int(informer.last_resource_version())
        revision = 0

        def while_down() -> None:
            nonlocal revision
            revision = compact_etcd(cp)

        cp.restart_apiserver(while_down=while_down)
        assert revision > held
        # the revision the informer holds is gone from etcd: the real server says 410
        with cp.session() as s:
            exact = {"resourceVersion": str(held), "resourceVersionMatch": "Exact"}
            old = s.get(f"{cp.url}/api/v1/namespaces/{NS}/pods", params=exact, timeout=30)
        assert old.status_code == 410, old.text
        # changes while the informer is reconnecting, relisting, or already watching again
        delete_pod(cp, "doomed")
        create_pod(cp, "born")
        want = pod_names(cp)
        assert sorted(want) == ["born", "keep"]
        wait_until(lambda: cached() == want, WAIT_S, "the informer caught up", interval=0.2)
        wait_until(lambda: gone_count(registry) >= 1, WAIT_S, "the 410 counted", interval=0.2)
        assert "doomed" in deleted and "born" in added
        # and it keeps watching: a change after the relist arrives by the watch
        create_pod(cp, "after")
        wait_until(lambda: "after" in cached(), WAIT_S, "a pod created after the relist", interval=0.2)
    finally:
        informer.stop()
