"""The decision record: every filtered pod's latest verdict with its numbers, as JSON on the metrics port."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import requests

from hami.core.codec.nodelock import NodeLock, format_node_lock
from hami.scheduler.extender.daemon import Extender
from hami.scheduler.extender.decisions import DecisionStore, dominant_reason
from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.extender import bind_pod, create_pod, filter_pod, metrics_text, running
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until


def _decision(ext: Extender, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
    assert ext.metrics_server is not None
    got = requests.get(f"{ext.metrics_server.url}/debug/decisions/{namespace}/{name}", timeout=10)
    return got.status_code, got.json()


def test_unschedulable_pod_record_has_the_numbers(kube_api: KubeAPIServer) -> None:
    now = datetime.now().astimezone().replace(microsecond=0)
    lock = format_node_lock(NodeLock(now - timedelta(seconds=30), "default", "holder"))
    kube_api.store.put(gpu_node("small", mem=4096))
    kube_api.store.put(gpu_node("locked", mem=6000, annotations={"hami.io/mutex.lock": lock}))
    holder = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder", "namespace": "default"}}
    kube_api.store.put(holder)
    with running(kube_api) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("big", mem=8192, cores=30))
        assert filter_pod(ext, pod, ["small", "locked", "absent"])["NodeNames"] is None
        code, rec = _decision(ext, "default", "big")
        text = metrics_text(ext)
    assert code == 200
    assert (rec["phase"], rec["reason"]) == ("unschedulable", "CardInsufficientMemory")
    assert rec["request"] == [
        {"container": "c0", "gpus": 1, "memory_mib": 8192, "memory_percent": None, "cores": 30}
    ]
    nodes = {n["node"]: n for n in rec["nodes"]}
    # the node closest to fitting comes first: most free memory
    assert [n["node"] for n in rec["nodes"]] == ["locked", "small", "absent"]
    assert nodes["small"]["largest_free_memory_mib"] == 4096
    assert nodes["small"]["largest_free_cores"] == 100
    assert nodes["small"]["codes"] == {"CardInsufficientMemory": 2}
    held = nodes["locked"]["lock"]
    assert held["holder"] == "default/holder" and 30 <= held["age_seconds"] <= 40
    assert nodes["locked"]["schedulable"] == "node_lock"
    assert nodes["absent"]["reason"] == "node unregistered" and nodes["absent"]["schedulable"] == "no_devices"
    assert rec["node_lock_timeout_seconds"] == 300
    assert 'hami_scheduler_pending_pods{namespace="default",reason="CardInsufficientMemory"} 1.0' in text
    assert "hami_scheduler_decision_records 1.0" in text


def test_bind_completes_the_record_and_times_creation_to_bind(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))
    with running(kube_api) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p1", mem=1000))
        assert filter_pod(ext, pod, ["n1"])["NodeNames"] == ["n1"]
        assert _decision(ext, "default", "p1")[1]["phase"] == "fit"
        assert bind_pod(ext, pod, "n1") == ""
        code, rec = _decision(ext, "default", "p1")
        text = metrics_text(ext)
        missing = _decision(ext, "default", "never-filtered")
    assert code == 200 and (rec["phase"], rec["node"], rec["reason"]) == ("bound", "n1", "Bound")
    assert "hami_scheduler_pod_creation_to_bind_seconds_count 1.0" in text
    assert missing[0] == 404 and "has not filtered it" in missing[1]["error"]


def test_the_record_is_a_bounded_lru() -> None:
    evicted: list[int] = []
    store = DecisionStore(2, on_evict=lambda: evicted.append(1))
    store.put("ns", "a", {"phase": "fit"})
    store.put("ns", "b", {"phase": "fit"})
    store.update("ns", "a", phase="bound")  # a is now the most recent
    store.put("ns", "c", {"phase": "fit"})
    assert len(store) == 2 and len(evicted) == 1
    assert store.get("ns", "b") is None
    assert store.get("ns", "a")["phase"] == "bound"  # type: ignore[index]


def test_dominant_reason_counts_nodes() -> None:
    failed = {
        "a": "2/2 CardInsufficientMemory",
        "b": "1/2 CardInsufficientCore, 1/2 CardInsufficientMemory",
        "c": "node unregistered",
        "d": "NodeInsufficientDevice",
    }
    assert dominant_reason(failed) == "CardInsufficientMemory"
    assert dominant_reason({"c": "node unregistered"}) == "NodeUnregistered"
    assert dominant_reason({"d": "NodeInsufficientDevice"}) == "NodeInsufficientDevice"


def test_bad_paths_answer_json_errors(kube_api: KubeAPIServer) -> None:
    with running(kube_api) as ext:
        assert ext.metrics_server is not None
        base = ext.metrics_server.url
        listing = requests.get(f"{base}/debug/decisions", timeout=10)
        bad = requests.get(f"{base}/debug/decisions/only-namespace", timeout=10)
        post = requests.post(f"{base}/debug/decisions/a/b", timeout=10)
    assert listing.status_code == 200 and listing.json()["records"] == []
    assert bad.status_code == 404 and "NAMESPACE/NAME" in bad.json()["error"]
    assert post.status_code == 405


def test_pending_gpu_pods_follow_the_containers_not_a_stale_answer(kube_api: KubeAPIServer) -> None:
    """The answer is kept per pod between scrapes; a pod whose containers change is read again."""
    with running(kube_api) as ext:
        plain = create_pod(kube_api, ext, gpu_pod("p1", gpus=0, mem=None))
        other = create_pod(kube_api, ext, gpu_pod("p2"))
        assert [p.pod["metadata"]["name"] for p in ext.state.pending_gpu_pods()] == ["p2"]
        asks = gpu_pod("p1")
        asks["metadata"]["uid"] = plain["metadata"]["uid"]  # the same pod, now asking for a vGPU
        kube_api.store.put(asks)
        wait_until(lambda: len(ext.state.pending_gpu_pods()) == 2, what="p1 asks for a vGPU")
        other["status"] = {"phase": "Running"}
        kube_api.store.put(other)
        wait_until(lambda: [p.pod["metadata"]["name"] for p in ext.state.pending_gpu_pods()] == ["p1"],
                   what="p2 running")
