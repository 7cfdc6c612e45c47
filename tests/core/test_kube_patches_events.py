"""Merge-patch helpers and the event recorder against the API emulator over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry

from hami.core.kube import errors
from hami.core.kube.client import new_api_client
from hami.core.kube.events import NORMAL, WARNING, EventRecorder, ObjectRef
from hami.core.kube.options import KubeOptions
from hami.core.kube.patches import patch_node_annotations, patch_pod_metadata
from hami.testing.builders import node
from hami.testing.kubeapi import KubeAPIServer

LOCK = "hami.io/mutex.lock"


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def api(kube_api: KubeAPIServer, registry: CollectorRegistry) -> Iterator[Any]:
    client = new_api_client(KubeOptions(host=kube_api.url, qps=-1, timeout=5), registry=registry)
    yield client
    client.close()


def _node(kube_api: KubeAPIServer, **annotations: str) -> dict[str, Any]:
    return kube_api.store.put(node("n1", annotations=annotations))


def test_node_annotations_are_set_and_removed_leaving_others(kube_api: KubeAPIServer, api: Any) -> None:
    _node(kube_api, keep="me", old="x")
    node = patch_node_annotations(api, "n1", {LOCK: "2024-01-01T00:00:00Z,default,p", "old": None})
    assert node["metadata"]["annotations"] == {"keep": "me", LOCK: "2024-01-01T00:00:00Z,default,p"}
    assert kube_api.store.get("nodes", "n1")["metadata"]["annotations"] == node["metadata"]["annotations"]
    assert kube_api.requests.records[-1].content_type.startswith("application/merge-patch+json")


def test_resource_version_precondition_gives_conflict(kube_api: KubeAPIServer, api: Any) -> None:
    stale = _node(kube_api)["metadata"]["resourceVersion"]
    current = patch_node_annotations(api, "n1", {"a": "1"})["metadata"]["resourceVersion"]
    with pytest.raises(errors.Conflict) as caught:
        patch_node_annotations(api, "n1", {LOCK: "mine"}, resource_version=stale)
    assert caught.value.status == 409
    assert LOCK not in kube_api.store.get("nodes", "n1")["metadata"]["annotations"]
    node = patch_node_annotations(api, "n1", {LOCK: "mine"}, resource_version=current)
    assert node["metadata"]["annotations"][LOCK] == "mine"


def test_missing_objects_and_server_errors_are_typed(kube_api: KubeAPIServer, api: Any) -> None:
    with pytest.raises(errors.NotFound):
        patch_node_annotations(api, "ghost", {"a": "1"})
    with pytest.raises(errors.NotFound):
        patch_pod_metadata(api, "default", "ghost", annotations={"a": "1"})
    _node(kube_api)
    kube_api.faults.add(method="PATCH", path="/nodes/n1$", status=500, message="etcd unavailable")
    with pytest.raises(errors.ApiError) as caught:
        patch_node_annotations(api, "n1", {"a": "1"})
    assert type(caught.value) is errors.ApiError
    assert caught.value.status == 500
    assert "etcd unavailable" in str(caught.value)


def test_pod_metadata_patch(kube_api: KubeAPIServer, api: Any) -> None:
    kube_api.store.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "p", "namespace": "ns", "labels": {"app": "x", "drop": "me"}}})
    pod = patch_pod_metadata(api, "ns", "p", annotations={"hami.io/vgpu-node": "n1"},
                             labels={"hami.io/vgpu-node": "n1", "drop": None})
    assert pod["metadata"]["labels"] == {"app": "x", "hami.io/vgpu-node": "n1"}
    assert pod["metadata"]["annotations"] == {"hami.io/vgpu-node": "n1"}
    with pytest.raises(errors.Conflict):
        patch_pod_metadata(api, "ns", "p", labels={"a": "b"}, resource_version="1")


def _events(api: Any, namespace: str) -> list[Any]:
    return list(k8s.CoreV1Api(api).list_namespaced_event(namespace).items)


def test_events_are_created_and_repeats_aggregated(
    kube_api: KubeAPIServer, api: Any, registry: CollectorRegistry
) -> None:
    times = iter([1_700_000_000.0, 1_700_000_005.0, 1_700_000_009.0, 1_700_000_010.0])
    recorder = EventRecorder(api, "hami-scheduler", "host-1", clock=lambda: next(times))
    pod = ObjectRef.from_object(
        {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "7"}}, kind="Pod")
    try:
        for _ in range(3):
            recorder.event(pod, WARNING, "FilteringFailed", "no node fits")
        recorder.event(pod, NORMAL, "BindingSucceed", "bound to n1")
        assert recorder.flush(10)
    finally:
        recorder.stop()
    events = sorted(_events(api, "ns"), key=lambda e: e.reason)
    assert [(e.reason, e.type, e.count) for e in events] == [
        ("BindingSucceed", NORMAL, 1), ("FilteringFailed", WARNING, 3)]
    failed = events[1]
    assert failed.metadata.name == f"p.{int(1_700_000_000 * 1e9):x}"
    assert failed.message == "no node fits"
    assert (failed.involved_object.kind, failed.involved_object.name, failed.involved_object.namespace,
            failed.involved_object.uid) == ("Pod", "p", "ns", "u-1")
    assert (failed.source.component, failed.source.host) == ("hami-scheduler", "host-1")
    assert failed.first_timestamp.timestamp() == 1_700_000_000
    assert failed.last_timestamp.timestamp() == 1_700_000_009
    assert registry.get_sample_value("hami_kube_events_total", {"result": "created"}) == 2
    assert registry.get_sample_value("hami_kube_events_total", {"result": "aggregated"}) == 2


def test_node_events_go_to_default_and_a_deleted_event_is_recreated(
    kube_api: KubeAPIServer, api: Any
) -> None:
    recorder = EventRecorder(api, "hami-device-plugin", "n1")
    node = ObjectRef(kind="Node", name="n1")
    try:
        recorder.event(node, WARNING, "UnhealthyDevice", "GPU-1 xid 79")
        assert recorder.flush(10)
        (first,) = _events(api, "default")
        kube_api.store.remove("events", first.metadata.name, "default")
        recorder.event(node, WARNING, "UnhealthyDevice", "GPU-1 xid 79")
        assert recorder.flush(10)
    finally:
        recorder.stop()
    (again,) = _events(api, "default")
    assert (again.metadata.name, again.count, again.involved_object.kind) == (first.metadata.name, 2, "Node")


def test_api_failures_are_counted_not_raised(
    kube_api: KubeAPIServer, api: Any, registry: CollectorRegistry
) -> None:
    kube_api.faults.add(method="POST", path="/events$", status=500, times=1)
    recorder = EventRecorder(api, "hami-scheduler")
    ref = ObjectRef(kind="Pod", name="p", namespace="default")
    try:
        recorder.event(ref, NORMAL, "FilteringSucceed", "first")
        recorder.event(ref, NORMAL, "FilteringSucceed", "second")
        assert recorder.flush(10)
    finally:
        recorder.stop()
    assert registry.get_sample_value("hami_kube_events_total", {"result": "error"}) == 1
    assert [e.message for e in _events(api, "default")] == ["second"]
    with pytest.raises(ValueError, match="Normal or Warning"):
        recorder.event(ref, "Error", "Bad", "not a valid type")
