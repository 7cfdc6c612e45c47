"""Bind under concurrency, node-lock expiry, API-server faults, malformed requests, leader election."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
import requests

from hami.core.codec.nodelock import NodeLock, format_node_lock
from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.kube.options import KubeOptions
from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.extender import bind_pod, create_pod, events_for, filter_pod, metrics_text, running, url
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until

LOCK = "hami.io/mutex.lock"


def _lock_value(api: KubeAPIServer, node: str) -> str | None:
    stored = api.store.get("nodes", node)
    assert stored is not None
    value: str | None = stored["metadata"].get("annotations", {}).get(LOCK)
    return value


def _release(api: KubeAPIServer, node: str) -> None:
    """What the device plugin does after Allocate: drop the node lock."""
    stored = api.store.get("nodes", node)
    assert stored is not None
    stored["metadata"]["annotations"].pop(LOCK, None)
    api.store.put(stored)


def test_50_concurrent_pods_never_share_an_exclusive_card(kube_api: KubeAPIServer) -> None:
    nodes = [f"n{i}" for i in range(10)]
    for name in nodes:
        kube_api.store.put(gpu_node(name, gpus=5, count=1))
    with running(kube_api) as ext:
        pods = [create_pod(kube_api, ext, gpu_pod(f"p{i}", mem=None, cores=100)) for i in range(50)]
        release_lock = threading.Lock()
        failures: list[str] = []

        def schedule(pod: dict[str, Any]) -> None:
            try:
                bind_until_done(pod)
            except Exception as exc:  # a thread's exception would otherwise vanish
                failures.append(f"{pod['metadata']['name']}: {exc!r}")

        def bind_until_done(pod: dict[str, Any]) -> None:
            for attempt in range(400):
                reply = filter_pod(ext, pod, nodes)
                if not reply["NodeNames"]:
                    failures.append(f"{pod['metadata']['name']}: {reply}")
                    return
                node = reply["NodeNames"][0]
                error = bind_pod(ext, pod, node)
                if not error:
                    with release_lock:
                        _release(kube_api, node)
                    return
                assert "node lock contention" in error, error
                time.sleep(min(0.002 * attempt, 0.05))  # back off like kube-scheduler's retry queue
            failures.append(f"{pod['metadata']['name']}: never bound")

        threads = [threading.Thread(target=schedule, args=(p,)) for p in pods]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not failures
        uuids: Counter[str] = Counter()
        for i in range(50):
            stored = kube_api.store.get("pods", f"p{i}", "default")
            assert stored is not None and stored["spec"].get("nodeName")
            (devs, _empty) = decode_pod_devices(
                stored["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
            )
            assert all(d.uuid.startswith(f"GPU-{stored['spec']['nodeName']}-") for d in devs)
            uuids.update(d.uuid for d in devs)
        assert len(uuids) == 50 and set(uuids.values()) == {1}
        assert (
            kube_api.requests.count(
                method="POST",
                path=r"/binding$",
            )
            == 50
        )


def test_stale_lock_from_a_crashed_scheduler_expires(kube_api: KubeAPIServer) -> None:
    stale = format_node_lock(
        NodeLock(datetime.now().astimezone() - timedelta(minutes=6), "default", "holder")
    )
    kube_api.store.put(gpu_node("n1", annotations={LOCK: stale}))
    kube_api.store.put(gpu_pod("holder"))
    with running(kube_api) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p1"))
        assert filter_pod(ext, pod, ["n1"])["NodeNames"] == ["n1"]
        assert bind_pod(ext, pod, "n1") == ""
        value = _lock_value(kube_api, "n1")
        assert value is not None and value.endswith(",default,p1")
        assert 'hami_scheduler_node_lock_expired_total{cause="expired"} 1.0' in metrics_text(ext)


def test_fresh_lock_of_a_live_pod_blocks_bind_and_keeps_the_lock(kube_api: KubeAPIServer) -> None:
    fresh = format_node_lock(NodeLock(datetime.now().astimezone(), "default", "holder"))
    kube_api.store.put(gpu_node("n1", annotations={LOCK: fresh}))
    kube_api.store.put(gpu_pod("holder"))
    with running(kube_api, node_lock_timeout=timedelta(minutes=2)) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p1"))
        filter_pod(ext, pod, ["n1"])
        error = bind_pod(ext, pod, "n1")
        assert error == "node n1 has been locked within 2m0s: node lock contention"
        assert _lock_value(kube_api, "n1") == fresh
        ext.recorder.flush()
        assert ("BindingFailed", error) in events_for(kube_api, "p1")
        assert "hami_scheduler_node_lock_timeout_seconds 120.0" in metrics_text(ext)


def test_lock_of_a_deleted_pod_is_taken_over(kube_api: KubeAPIServer) -> None:
    fresh = format_node_lock(NodeLock(datetime.now().astimezone(), "default", "gone"))
    kube_api.store.put(gpu_node("n1", annotations={LOCK: fresh}))
    with running(kube_api) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p1"))
        filter_pod(ext, pod, ["n1"])
        assert bind_pod(ext, pod, "n1") == ""
        assert 'hami_scheduler_node_lock_expired_total{cause="owner_gone"} 1.0' in metrics_text(ext)


def test_409_on_the_lock_patch_is_retried(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))
    with running(kube_api) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p1"))
        filter_pod(ext, pod, ["n1"])
        kube_api.requests.clear()
        kube_api.faults.add(method="PATCH", path=r"/nodes/n1$", status=409, times=1)
        assert bind_pod(ext, pod, "n1") == ""
        assert kube_api.requests.count(method="PATCH", path=r"/nodes/n1$") == 2
        assert (_lock_value(kube_api, "n1") or "").endswith(",default,p1")


def test_500_on_binding_releases_the_lock_and_records_the_failure(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))
    with running(kube_api) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p1"))
        filter_pod(ext, pod, ["n1"])
        kube_api.faults.add(method="POST", path=r"/binding$", status=500, times=1)
        error = bind_pod(ext, pod, "n1")
        assert error.startswith("500 ")
        assert _lock_value(kube_api, "n1") is None
        stored = kube_api.store.get("pods", "p1", "default")
        assert stored is not None and not stored["spec"].get("nodeName")
        ext.recorder.flush()
        assert ("BindingFailed", error) in events_for(kube_api, "p1")
        assert 'hami_scheduler_api_errors_total{operation="bind",reason="status_500"} 1.0' in metrics_text(
            ext
        )
        assert bind_pod(ext, pod, "n1") == ""  # kube-scheduler's retry succeeds


def test_api_timeout_on_the_binding_fails_bind_and_releases_the_lock(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))
    with running(kube_api, kube=KubeOptions(qps=-1, host=kube_api.url, timeout=0.5)) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p1"))
        filter_pod(ext, pod, ["n1"])
        kube_api.faults.add(method="POST", path=r"/pods/p1/binding$", delay=2.0, times=1)
        error = bind_pod(ext, pod, "n1")
        assert "Timeout" in error
        assert _lock_value(kube_api, "n1") is None


def test_500_on_the_binding_keeps_the_reservation_until_the_pod_is_filtered_again(
    kube_api: KubeAPIServer,
) -> None:
    kube_api.store.put(gpu_node("n1", gpus=1, count=1))
    with running(kube_api) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p1", mem=None, cores=100))
        other = create_pod(kube_api, ext, gpu_pod("p2", mem=None, cores=100))
        assert filter_pod(ext, pod, ["n1"])["NodeNames"] == ["n1"]
        kube_api.faults.add(method="POST", path=r"/pods/p1/binding$", status=500, times=1)
        assert bind_pod(ext, pod, "n1").startswith("500")
        assert _lock_value(kube_api, "n1") is None
        stored = kube_api.store.get("pods", "p1", "default")
        assert stored is not None and "hami.io/bind-phase" not in stored["metadata"].get("annotations", {})
        # The exclusive card stays p1's: another pod does not get it, p1's retry does.
        assert filter_pod(ext, other, ["n1"])["NodeNames"] is None
        assert filter_pod(ext, pod, ["n1"])["NodeNames"] == ["n1"]
        assert bind_pod(ext, pod, "n1") == ""
        bound = kube_api.store.get("pods", "p1", "default")
        assert bound is not None and bound["metadata"]["annotations"]["hami.io/vgpu-node"] == "n1"


def test_malformed_requests_get_a_4xx_with_a_message(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))
    with running(kube_api) as ext:
        for path in ("/filter", "/bind", "/webhook"):
            r = requests.post(url(ext, path), data=b"", timeout=10)
            assert (r.status_code, r.json()["Error"]) == (400, "Please send a request body")
            r = requests.post(url(ext, path), data=b'{"Pod": ', timeout=10)
            assert r.status_code == 400 and r.json()["Error"].startswith("invalid JSON")
            r = requests.post(url(ext, path), data=b"[" + b"1," * (1 << 20) + b"1]", timeout=10)
            assert r.status_code == 413 and "too large" in r.text  # the server's limit, before the app
            r = requests.post(url(ext, path), data=b"[1, 2]", timeout=10)
            assert r.status_code == 400
        r = requests.post(url(ext, "/filter"), json={"Pod": None, "NodeNames": ["n1"]}, timeout=10)
        assert (r.status_code, r.json()) == (200, {"Error": "extender args missing pod"})
        r = requests.post(url(ext, "/filter"), json={"pod": {}, "nodenames": "n1"}, timeout=10)
        assert r.status_code == 400
        r = requests.post(url(ext, "/bind"), json={"PodName": 3}, timeout=10)
        assert r.status_code == 400
        assert requests.get(url(ext, "/filter"), timeout=10).status_code == 405
        assert requests.get(url(ext, "/healthz"), timeout=10).status_code == 200
        assert requests.get(url(ext, "/readyz"), timeout=10).status_code == 200


def test_a_failing_filter_is_a_500_with_a_line_and_the_extender_serves_on(
    kube_api: KubeAPIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube_api.store.put(gpu_node("n1"))
    with running(kube_api) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p1", mem=1024))

        def broken(*_args: Any) -> dict[str, Any]:
            raise RuntimeError("boom")

        monkeypatch.setattr(ext.filters, "filter", broken)
        r = requests.post(url(ext, "/filter"), json={"Pod": pod, "NodeNames": ["n1"]}, timeout=10)
        assert (r.status_code, r.json()) == (500, {"Error": "internal error; see the extender's log"})
        monkeypatch.undo()
        assert filter_pod(ext, pod, ["n1"])["NodeNames"] == ["n1"]


def test_webhook_sets_exclusive_cores_and_scheduler_name(kube_api: KubeAPIServer) -> None:
    import base64
    import json

    with running(kube_api, scheduler_name="hami-scheduler") as ext:
        pod = gpu_pod("w", mem=None)
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "r1", "namespace": "default", "object": pod},
        }
        r = requests.post(url(ext, "/webhook"), json=review, timeout=10)
        response = r.json()["response"]
        assert r.status_code == 200 and response["uid"] == "r1" and response["allowed"] is True
        patch = json.loads(base64.b64decode(response["patch"]))
        assert {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in patch
        assert {
            "op": "add",
            "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores",
            "value": "100",
        } in patch
        pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
        r = requests.post(url(ext, "/webhook"), json=review, timeout=10)
        assert r.json()["response"]["allowed"] is False
        assert r.json()["response"]["status"]["message"] == "container c0 is privileged"


def test_two_replicas_only_the_lease_holder_binds(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))
    kube_api.store.put(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "hami-scheduler", "namespace": "kube-system"},
            "spec": {"holderIdentity": "replica-a_1234", "leaseDurationSeconds": 3600},
        }
    )
    common: dict[str, Any] = {
        "leader_elect": True,
        "leader_elect_resource_name": "hami-scheduler",
        "leader_elect_resource_namespace": "kube-system",
    }
    with (
        running(kube_api, leader_identity="replica-a", **common) as a,
        running(kube_api, leader_identity="replica-b", **common) as b,
    ):
        wait_until(a.leader.is_leader, what="a leads")
        assert not b.leader.is_leader()
        pod = create_pod(kube_api, b, gpu_pod("p1"))
        assert filter_pod(b, pod, ["n1"])["NodeNames"] == ["n1"]  # the follower filters
        kube_api.requests.clear()
        assert "not the leader" in bind_pod(b, pod, "n1")
        assert kube_api.requests.count(method="POST", path="/binding$") == 0
        assert _lock_value(kube_api, "n1") is None
        assert "hami_scheduler_is_leader 0.0" in metrics_text(b)
        assert "hami_scheduler_is_leader 1.0" in metrics_text(a)
        wait_until(lambda: a.state.get_pod("default", "p1"), what="leader sees the pod")
        # The leading kube-scheduler filters and binds through its own sidecar, the leader.
        assert filter_pod(a, pod, ["n1"])["NodeNames"] == ["n1"]
        assert bind_pod(a, pod, "n1") == ""
        assert kube_api.requests.count(method="POST", path="/binding$") == 1
        # The lease moves: now b leads and a never binds again.
        lease = kube_api.store.get("leases", "hami-scheduler", "kube-system")
        assert lease is not None
        lease["spec"]["holderIdentity"] = "replica-b_99"
        kube_api.store.put(lease)
        wait_until(b.leader.is_leader, what="b leads")
        wait_until(lambda: not a.leader.is_leader(), what="a follows")
