"""Label and field selectors on lists, through the official client."""

from __future__ import annotations

import pytest
from kubernetes import client

from hami.testing.kubeapi import KubeAPIServer
from hami.testing.kubeapi.errors import ApiError
from hami.testing.kubeapi.selectors import parse_label_selector

NODES = {
    "a": {"gpu": "a100", "zone": "z1"},
    "b": {"gpu": "h100", "zone": "z2", "mig": "on"},
    "c": {"zone": "z1", "count": "4"},
}


@pytest.fixture
def labelled_nodes(kube_api: KubeAPIServer) -> None:
    for name, labels in NODES.items():
        kube_api.store.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})


@pytest.mark.parametrize(("selector", "expected"), [
    ("gpu=a100", ["a"]),
    ("gpu==h100", ["b"]),
    ("gpu!=a100", ["b", "c"]),
    ("gpu in (a100,h100)", ["a", "b"]),
    ("gpu notin (a100)", ["b", "c"]),
    ("mig", ["b"]),
    ("!gpu", ["c"]),
    ("zone=z1,gpu", ["a"]),
    ("zone in (z1, z2),!mig", ["a", "c"]),
    ("count>3", ["c"]),
    ("count<3", []),
    ("", ["a", "b", "c"]),
])
def test_label_selectors(kube_client: client.ApiClient, labelled_nodes: None, selector: str,
                         expected: list[str]) -> None:
    nodes = client.CoreV1Api(kube_client).list_node(label_selector=selector)
    assert [n.metadata.name for n in nodes.items] == expected


@pytest.mark.parametrize("selector", ["a in (b", "=x", "a=b c", "a in (b c)", "a>x"])
def test_malformed_label_selectors(selector: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_label_selector(selector)
    assert err.value.code == 400


def test_pod_field_selectors(kube_client: client.ApiClient, kube_api: KubeAPIServer) -> None:
    for name, ns, node, phase in (("p1", "a", "n1", "Running"), ("p2", "a", "", "Pending"),
                                  ("p3", "b", "n1", "Succeeded")):
        kube_api.store.put({"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": name, "namespace": ns},
                            "spec": {"containers": [], **({"nodeName": node} if node else {})},
                            "status": {"phase": phase}})
    v1 = client.CoreV1Api(kube_client)

    def names(selector: str, namespace: str | None = None) -> list[str]:
        pods = (v1.list_namespaced_pod(namespace, field_selector=selector) if namespace
                else v1.list_pod_for_all_namespaces(field_selector=selector))
        return [p.metadata.name for p in pods.items]

    assert names("spec.nodeName=n1") == ["p1", "p3"]
    assert names("spec.nodeName=n1,status.phase!=Succeeded") == ["p1"]
    assert names("status.phase==Pending") == ["p2"]
    assert names("metadata.namespace=b") == ["p3"]
    assert names("metadata.name=p2", namespace="a") == ["p2"]
    assert names("spec.nodeName=n1", namespace="b") == ["p3"]


def test_event_involved_object_selectors(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    new = client.EventsV1Api(kube_client)
    for name, pod in (("e1", "p1"), ("e2", "p2")):
        core.create_namespaced_event("default", {
            "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": "default"},
            "reason": "FilteringFailed", "type": "Warning", "source": {"component": "hami-scheduler"}})
        new.create_namespaced_event("default", {
            "metadata": {"name": name}, "regarding": {"kind": "Pod", "name": pod, "namespace": "default"},
            "reason": "FilteringFailed", "type": "Warning", "eventTime": "2024-01-01T00:00:00.000000Z",
            "reportingController": "hami-scheduler", "reportingInstance": "i", "action": "Filtering"})
    selector = "involvedObject.kind=Pod,involvedObject.name=p2"
    for api in (core, new):
        events = api.list_namespaced_event("default", field_selector=selector).items
        assert [e.metadata.name for e in events] == ["e2"]
    by_source = core.list_event_for_all_namespaces(field_selector="source=hami-scheduler,type=Warning")
    assert len(by_source.items) == 2
