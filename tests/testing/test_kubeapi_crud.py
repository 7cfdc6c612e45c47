"""CRUD of every served resource through the official client, and the real API's error shapes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from hami.testing.kubeapi import KubeAPIServer


def _status(exc: ApiException) -> dict[str, Any]:
    body = json.loads(exc.body)
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert body["code"] == exc.status
    return body  # type: ignore[no-any-return]


def test_node_lifecycle(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    created = v1.create_node({"metadata": {"name": "gpu-1", "labels": {"gpu": "on"}}})
    assert created.metadata.uid and created.metadata.creation_timestamp is not None
    rv = int(created.metadata.resource_version)

    got = v1.read_node("gpu-1")
    assert got.metadata.resource_version == str(rv) and got.metadata.labels == {"gpu": "on"}

    nodes = v1.list_node()
    assert [n.metadata.name for n in nodes.items] == ["gpu-1"]
    assert int(nodes.metadata.resource_version) >= rv

    got.metadata.labels["gpu"] = "off"
    updated = v1.replace_node("gpu-1", got)
    assert updated.metadata.labels == {"gpu": "off"} and int(updated.metadata.resource_version) > rv

    deleted = v1.delete_node("gpu-1")  # typed `object` by the client: a Status dict for nodes
    assert (deleted["status"], deleted["details"]["name"], deleted["details"]["kind"]) == (
        "Success", "gpu-1", "nodes")
    assert v1.list_node().items == []


def test_create_twice_is_already_exists(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_node({"metadata": {"name": "n"}})
    with pytest.raises(ApiException) as err:
        v1.create_node({"metadata": {"name": "n"}})
    body = _status(err.value)
    assert (err.value.status, body["reason"]) == (409, "AlreadyExists")
    assert body["message"] == 'nodes "n" already exists'


def test_missing_object_is_not_found(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    for call in (lambda: v1.read_namespaced_pod("nope", "default"),
                 lambda: v1.delete_namespaced_pod("nope", "default"),
                 lambda: v1.patch_node("nope", {"metadata": {"labels": {"a": "b"}}})):
        with pytest.raises(ApiException) as err:
            call()
        assert (err.value.status, _status(err.value)["reason"]) == (404, "NotFound")


def test_pod_create_sets_server_fields_and_generate_name(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    pod = v1.create_namespaced_pod("ml", {
        "metadata": {"generateName": "train-"},
        "spec": {"containers": [{"name": "main", "image": "cuda"}]},
        "status": {"phase": "Running"},
    })
    assert pod.metadata.name.startswith("train-") and len(pod.metadata.name) == len("train-") + 5
    assert pod.metadata.namespace == "ml"
    assert pod.status.phase == "Pending"  # the API ignores a client's status on create
    assert pod.spec.scheduler_name == "default-scheduler"
    assert [p.metadata.name for p in v1.list_namespaced_pod("ml").items] == [pod.metadata.name]
    assert v1.list_namespaced_pod("default").items == []
    assert len(v1.list_pod_for_all_namespaces().items) == 1
    deleted = v1.delete_namespaced_pod(pod.metadata.name, "ml")  # pods answer the deleted object
    assert deleted.metadata.uid == pod.metadata.uid


def test_update_of_main_resource_keeps_status_and_status_subresource_changes_only_status(
    kube_client: client.ApiClient,
) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "i"}]}})
    pod = v1.patch_namespaced_pod("p", "default", {"status": {"phase": "Running"},
                                                   "metadata": {"labels": {"x": "1"}}})
    assert pod.status.phase == "Pending" and pod.metadata.labels == {"x": "1"}
    pod = v1.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Running"},
                                                          "metadata": {"labels": {"x": "2"}}})
    assert pod.status.phase == "Running" and pod.metadata.labels == {"x": "1"}
    assert v1.read_namespaced_pod_status("p", "default").status.phase == "Running"


def test_put_with_stale_resource_version_is_conflict(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    first = v1.create_node({"metadata": {"name": "n"}})
    v1.patch_node("n", {"metadata": {"labels": {"moved": "on"}}})
    first.metadata.labels = {"stale": "write"}
    with pytest.raises(ApiException) as err:
        v1.replace_node("n", first)
    body = _status(err.value)
    assert (err.value.status, body["reason"]) == (409, "Conflict")
    assert "the object has been modified" in body["message"]
    assert v1.read_node("n").metadata.labels == {"moved": "on"}


def test_put_without_resource_version_is_unconditional(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_node({"metadata": {"name": "n"}})
    v1.patch_node("n", {"metadata": {"labels": {"a": "1"}}})
    replaced = v1.replace_node("n", {"metadata": {"name": "n", "labels": {"b": "2"}}})
    assert replaced.metadata.labels == {"b": "2"}


def test_name_mismatch_is_bad_request(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_node({"metadata": {"name": "n"}})
    with pytest.raises(ApiException) as err:
        v1.replace_node("n", {"metadata": {"name": "other"}})
    assert (err.value.status, _status(err.value)["reason"]) == (400, "BadRequest")


def test_delete_with_stale_precondition_is_conflict(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    rv = v1.create_node({"metadata": {"name": "n"}}).metadata.resource_version
    v1.patch_node("n", {"metadata": {"labels": {"a": "1"}}})
    with pytest.raises(ApiException) as err:
        v1.delete_node("n", body={"preconditions": {"resourceVersion": rv}})
    assert err.value.status == 409
    assert v1.read_node("n").metadata.name == "n"


def test_binding_assigns_once(kube_client: client.ApiClient, kube_api: KubeAPIServer) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "i"}]}})
    binding = {"metadata": {"name": "p", "annotations": {"hami.io/bind-phase": "allocating"}},
               "target": {"kind": "Node", "name": "gpu-1"}}
    # The real API answers a Status (Success, 201) that the client cannot read as a V1Binding, so
    # callers skip deserialisation, as they must against a real cluster.
    resp = v1.create_namespaced_pod_binding("p", "default", binding, _preload_content=False)
    assert resp.status == 201
    assert json.loads(resp.data)["status"] == "Success"
    pod = v1.read_namespaced_pod("p", "default")
    assert pod.spec.node_name == "gpu-1"
    assert pod.metadata.annotations == {"hami.io/bind-phase": "allocating"}
    assert [(c.type, c.status) for c in pod.status.conditions] == [("PodScheduled", "True")]

    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod_binding("p", "default", {**binding, "target": {"name": "gpu-2"}},
                                         _preload_content=False)
    body = _status(err.value)
    assert (err.value.status, body["reason"]) == (409, "Conflict")
    assert body["message"] == ('Operation cannot be fulfilled on pods/binding "p": '
                               'pod p is already assigned to node "gpu-1"')
    assert kube_api.store.get("pods", "p", "default")["spec"]["nodeName"] == "gpu-1"  # type: ignore[index]


def test_bindings_collection_binds_the_named_pod(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "i"}]}})
    resp = v1.create_namespaced_binding("default", {"metadata": {"name": "p"}, "target": {"name": "n1"}},
                                        _preload_content=False)
    assert resp.status == 201
    assert v1.read_namespaced_pod("p", "default").spec.node_name == "n1"


def test_events_core_and_events_k8s_io(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    events = client.EventsV1Api(kube_client)
    core.create_namespaced_event("default", {
        "metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "FilteringFailed", "message": "no node fits", "type": "Warning"})
    events.create_namespaced_event("default", {
        "metadata": {"name": "e2"}, "regarding": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "BindingSucceed", "note": "bound", "type": "Normal", "action": "Binding",
        "eventTime": "2024-01-01T00:00:00.000000Z", "reportingController": "hami-scheduler",
        "reportingInstance": "hami-scheduler-0"})
    assert [e.reason for e in core.list_namespaced_event("default").items] == ["FilteringFailed"]
    new = events.read_namespaced_event("e2", "default")
    assert (new.reason, new.regarding.name) == ("BindingSucceed", "p")
    events.patch_namespaced_event("e2", "default", {"note": "bound again"})
    assert events.list_event_for_all_namespaces().items[0].note == "bound again"
    events.delete_namespaced_event("e2", "default")
    core.delete_namespaced_event("e1", "default")
    assert core.list_event_for_all_namespaces().items == []


def test_leases(kube_client: client.ApiClient) -> None:
    coord = client.CoordinationV1Api(kube_client)
    lease = coord.create_namespaced_lease("kube-system", {
        "metadata": {"name": "hami-scheduler"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})
    lease.spec.holder_identity = "b"
    assert coord.replace_namespaced_lease("hami-scheduler", "kube-system", lease).spec.holder_identity == "b"
    with pytest.raises(ApiException) as err:
        coord.replace_namespaced_lease("hami-scheduler", "kube-system", lease)  # the old rv again
    assert err.value.status == 409
    assert [x.metadata.name for x in coord.list_namespaced_lease("kube-system").items] == ["hami-scheduler"]
    coord.delete_namespaced_lease("hami-scheduler", "kube-system")
    assert coord.list_lease_for_all_namespaces().items == []


@pytest.mark.parametrize("kind", ["resource_quota", "config_map"])
def test_namespaced_resources_crud(kube_client: client.ApiClient, kind: str) -> None:
    v1 = client.CoreV1Api(kube_client)
    body: dict[str, Any] = {"metadata": {"name": "x"}}
    body.update({"spec": {"hard": {"limits.nvidia.com/gpu": "4"}}} if kind == "resource_quota"
                else {"data": {"k": "v"}})
    call: Callable[..., Any] = getattr(v1, f"create_namespaced_{kind}")
    call("team", body)
    got = getattr(v1, f"read_namespaced_{kind}")("x", "team")
    assert got.metadata.namespace == "team"
    getattr(v1, f"patch_namespaced_{kind}")("x", "team", {"metadata": {"labels": {"a": "b"}}})
    assert getattr(v1, f"list_namespaced_{kind}")("team").items[0].metadata.labels == {"a": "b"}
    getattr(v1, f"delete_namespaced_{kind}")("x", "team")
    assert getattr(v1, f"list_namespaced_{kind}")("team").items == []


def test_resourcequota_status_subresource(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_namespaced_resource_quota("t", {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "2"}}})
    v1.patch_namespaced_resource_quota_status("q", "t", {"status": {"used": {"pods": "1"}}})
    assert v1.read_namespaced_resource_quota("q", "t").status.used == {"pods": "1"}


def test_namespaces_and_discovery(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    names = [n.metadata.name for n in v1.list_namespace().items]
    assert names == ["default", "kube-system"]
    v1.create_namespace({"metadata": {"name": "gpu"}})
    assert v1.read_namespace("gpu").status.phase == "Active"
    assert client.VersionApi(kube_client).get_code().git_version.startswith("v1.")
    core = {r.name for r in v1.get_api_resources().resources}
    assert {"nodes", "pods", "pods/binding", "pods/status", "events", "resourcequotas"} <= core
    groups = {g.name for g in client.ApisApi(kube_client).get_api_versions().groups}
    assert {"coordination.k8s.io", "events.k8s.io", "apps", "rbac.authorization.k8s.io"} <= groups
    assert {r.name for r in client.CoordinationV1Api(kube_client).get_api_resources().resources} == {"leases"}
    health = kube_client.call_api("GET", kube_client.configuration.host + "/readyz")
    health.read()
    assert health.status == 200


def test_dynamic_client_discovers_and_serves(kube_client: client.ApiClient) -> None:
    leases = dynamic.DynamicClient(kube_client).resources.get(api_version="coordination.k8s.io/v1",
                                                             kind="Lease")
    leases.create(namespace="kube-system", body={"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}})
    assert [x.metadata.name for x in leases.get(namespace="kube-system").items] == ["l"]


def test_direct_store_access(kube_client: client.ApiClient, kube_api: KubeAPIServer) -> None:
    kube_api.store.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
                        "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
    v1 = client.CoreV1Api(kube_client)
    assert v1.read_node("n").status.allocatable == {"nvidia.com/gpu": "8"}
    v1.patch_node("n", {"metadata": {"labels": {"a": "b"}}})
    assert kube_api.store.get("nodes", "n")["metadata"]["labels"] == {"a": "b"}  # type: ignore[index]
    assert [n["metadata"]["name"] for n in kube_api.store.list("nodes", label_selector="a=b")] == ["n"]
    assert kube_api.store.remove("nodes", "n") is not None
    assert kube_api.store.get("nodes", "n") is None


def test_store_hands_out_copies(kube_client: client.ApiClient, kube_api: KubeAPIServer) -> None:
    """What a test gives to or gets from the fixture methods is its own: changing it changes
    nothing in the store (the server shares stored objects internally)."""
    given = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"a": "1"}}}
    got = [kube_api.store.put(given)]
    got += [kube_api.store.get("nodes", "n"), *kube_api.store.list("nodes")]  # type: ignore[list-item]
    got.append(kube_api.store.wait_for("nodes", "n"))  # type: ignore[arg-type]
    for obj in [given, *got]:
        obj["metadata"]["labels"]["a"] = "changed"
        obj["metadata"]["resourceVersion"] = "0"
    served = client.CoreV1Api(kube_client).read_node("n")
    assert served.metadata.labels == {"a": "1"} and served.metadata.resource_version != "0"
    removed = kube_api.store.remove("nodes", "n")
    assert removed is not None and removed["metadata"]["labels"] == {"a": "1"}


def test_list_pages_with_limit_and_continue(kube_client: client.ApiClient, kube_api: KubeAPIServer) -> None:
    for i in range(5):
        kube_api.store.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}})
    v1 = client.CoreV1Api(kube_client)
    first = v1.list_node(limit=2)
    assert [n.metadata.name for n in first.items] == ["n0", "n1"]
    assert first.metadata.remaining_item_count == 3
    second = v1.list_node(limit=2, _continue=first.metadata._continue)
    assert [n.metadata.name for n in second.items] == ["n2", "n3"]
    assert second.metadata.resource_version == first.metadata.resource_version
    last = v1.list_node(limit=2, _continue=second.metadata._continue)
    assert [n.metadata.name for n in last.items] == ["n4"]
    assert last.metadata._continue is None
    with pytest.raises(ApiException) as err:
        v1.list_node(_continue="not-a-token")
    assert err.value.status == 400


def test_delete_collection_with_selector(kube_client: client.ApiClient, kube_api: KubeAPIServer) -> None:
    for name, team in (("a", "x"), ("b", "y"), ("c", "x")):
        kube_api.store.put({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": name, "namespace": "t", "labels": {"team": team}}})
    v1 = client.CoreV1Api(kube_client)
    v1.delete_collection_namespaced_config_map("t", label_selector="team=x")
    assert [c.metadata.name for c in v1.list_namespaced_config_map("t").items] == ["b"]
