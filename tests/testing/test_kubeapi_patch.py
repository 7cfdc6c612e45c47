"""Merge, strategic-merge and JSON patches through the official client, with rv preconditions."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from hami.testing.kubeapi import KubeAPIServer
from hami.testing.kubeapi.patch import PatchError, json_patch, merge_patch, strategic_merge_patch

MERGE = "application/merge-patch+json"


def _pod(name: str = "p") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"app": "a", "tier": "t"}, "finalizers": ["x/a"]},
            "spec": {"containers": [
                {"name": "main", "image": "cuda:1", "env": [{"name": "A", "value": "1"}],
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                {"name": "side", "image": "busybox"}],
                "tolerations": [{"key": "gpu", "operator": "Exists"}]}}


def test_merge_patch_rfc7386_null_deletes(kube_client: client.ApiClient, kube_api: KubeAPIServer) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_namespaced_pod("default", _pod())
    pod = v1.patch_namespaced_pod("p", "default", {
        "metadata": {"labels": {"app": None, "new": "1"}},
        "spec": {"containers": [{"name": "only", "image": "x"}]},
    }, _content_type=MERGE)
    assert pod.metadata.labels == {"tier": "t", "new": "1"}
    assert [c.name for c in pod.spec.containers] == ["only"]  # merge patch replaces lists
    assert kube_api.requests.records[-1].content_type == MERGE


def test_strategic_merge_patch_merges_named_lists(kube_client: client.ApiClient,
                                                  kube_api: KubeAPIServer) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_namespaced_pod("default", _pod())
    # A dict body: the client picks strategic merge patch itself.
    pod = v1.patch_namespaced_pod("p", "default", {
        "metadata": {"finalizers": ["x/b"], "labels": {"tier": None}},
        "spec": {"containers": [
            {"name": "main", "image": "cuda:2", "env": [{"name": "B", "value": "2"}]},
            {"name": "new", "image": "n"},
            {"name": "side", "$patch": "delete"}],
            "tolerations": [{"key": "other", "operator": "Exists"}]},
    })
    assert kube_api.requests.records[-1].content_type == "application/strategic-merge-patch+json"
    assert pod.metadata.labels == {"app": "a"}
    assert pod.metadata.finalizers == ["x/a", "x/b"]
    assert [(c.name, c.image) for c in pod.spec.containers] == [("main", "cuda:2"), ("new", "n")]
    main = pod.spec.containers[0]
    assert [(e.name, e.value) for e in main.env] == [("A", "1"), ("B", "2")]
    assert main.resources.limits == {"nvidia.com/gpu": "1"}
    assert [t.key for t in pod.spec.tolerations] == ["other"]  # no merge key: replaced


def test_json_patch_all_operations(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_namespaced_pod("default", _pod())
    node = v1.patch_namespaced_pod("p", "default", [  # a list body: the client sends json-patch
        {"op": "test", "path": "/metadata/labels/app", "value": "a"},
        {"op": "add", "path": "/metadata/annotations", "value": {"hami.io/a~b": "1"}},
        {"op": "add", "path": "/metadata/annotations/x~1y", "value": "2"},
        {"op": "replace", "path": "/spec/containers/0/image", "value": "cuda:3"},
        {"op": "remove", "path": "/spec/containers/1"},
        {"op": "copy", "from": "/metadata/labels/app", "path": "/metadata/labels/copy"},
        {"op": "move", "from": "/metadata/labels/tier", "path": "/metadata/labels/moved"},
        {"op": "add", "path": "/metadata/finalizers/-", "value": "x/z"},
    ])
    assert node.metadata.annotations == {"hami.io/a~b": "1", "x/y": "2"}
    assert node.metadata.labels == {"app": "a", "copy": "a", "moved": "t"}
    assert [c.image for c in node.spec.containers] == ["cuda:3"]
    assert node.metadata.finalizers == ["x/a", "x/z"]


def test_json_patch_failed_test_is_invalid_and_changes_nothing(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    rv = v1.create_node({"metadata": {"name": "n", "labels": {"a": "1"}}}).metadata.resource_version
    with pytest.raises(ApiException) as err:
        v1.patch_node("n", [{"op": "add", "path": "/metadata/labels/b", "value": "2"},
                            {"op": "test", "path": "/metadata/labels/a", "value": "other"}])
    assert (err.value.status, json.loads(err.value.body)["reason"]) == (422, "Invalid")
    node = v1.read_node("n")
    assert (node.metadata.labels, node.metadata.resource_version) == ({"a": "1"}, rv)


@pytest.mark.parametrize("content_type", [MERGE, "application/strategic-merge-patch+json"])
def test_resource_version_in_patch_body_is_a_precondition(kube_client: client.ApiClient,
                                                          content_type: str) -> None:
    """HAMi's node lock: patch annotations with the rv read; a stale rv must fail with 409."""
    v1 = client.CoreV1Api(kube_client)
    rv = v1.create_node({"metadata": {"name": "n"}}).metadata.resource_version
    lock = {"metadata": {"resourceVersion": rv, "annotations": {"hami.io/mutex.lock": "t1"}}}
    locked = v1.patch_node("n", lock, _content_type=content_type)
    assert locked.metadata.annotations == {"hami.io/mutex.lock": "t1"}
    assert locked.metadata.resource_version != rv
    with pytest.raises(ApiException) as err:
        v1.patch_node("n", {"metadata": {"resourceVersion": rv, "annotations": {"hami.io/mutex.lock": "t2"}}},
                      _content_type=content_type)
    assert (err.value.status, json.loads(err.value.body)["reason"]) == (409, "Conflict")
    assert v1.read_node("n").metadata.annotations == {"hami.io/mutex.lock": "t1"}


def test_json_patch_test_on_resource_version_is_a_precondition(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    rv = v1.create_node({"metadata": {"name": "n"}}).metadata.resource_version
    v1.patch_node("n", {"metadata": {"labels": {"a": "1"}}})
    with pytest.raises(ApiException) as err:
        v1.patch_node("n", [{"op": "replace", "path": "/metadata/resourceVersion", "value": rv},
                            {"op": "add", "path": "/metadata/labels/b", "value": "2"}])
    assert err.value.status == 409


def test_unsupported_patch_type_is_415(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    v1.create_node({"metadata": {"name": "n"}})
    with pytest.raises(ApiException) as err:
        v1.patch_node("n", {"metadata": {}}, _content_type="application/apply-patch+yaml")
    assert err.value.status == 415


def test_noop_patch_keeps_resource_version(kube_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(kube_client)
    node = v1.create_node({"metadata": {"name": "n", "labels": {"a": "1"}}})
    again = v1.patch_node("n", {"metadata": {"labels": {"a": "1"}}})
    assert again.metadata.resource_version == node.metadata.resource_version


def test_concurrent_lock_patches_exactly_one_wins(kube_client: client.ApiClient,
                                                  kube_api: KubeAPIServer) -> None:
    v1 = client.CoreV1Api(kube_client)
    rv = v1.create_node({"metadata": {"name": "n"}}).metadata.resource_version
    contenders = 8
    barrier = threading.Barrier(contenders)
    outcomes: list[int] = []
    lock = threading.Lock()

    def contend(i: int) -> None:
        api = client.CoreV1Api(kube_client)
        barrier.wait(timeout=10)
        try:
            api.patch_node("n", {"metadata": {"resourceVersion": rv,
                                              "annotations": {"hami.io/mutex.lock": f"owner-{i}"}}})
            code = 200
        except ApiException as exc:
            code = exc.status
        with lock:
            outcomes.append(code)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes) == [200] + [409] * (contenders - 1)
    owner = v1.read_node("n").metadata.annotations["hami.io/mutex.lock"]
    assert owner.startswith("owner-")
    assert kube_api.requests.count(method="PATCH", path="/api/v1/nodes/n") == contenders


# -- the pure functions, on cases the client path does not reach --------------------------------

def test_merge_patch_rfc7386_examples() -> None:
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}
    assert merge_patch("x", {"a": {"bb": {"ccc": None}}}) == {"a": {"bb": {}}}


def test_strategic_directives() -> None:
    target = {"spec": {"containers": [{"name": "a", "image": "1"}], "x": {"keep": 1, "drop": 2}},
              "metadata": {"finalizers": ["f1", "f2"]}}
    patched = strategic_merge_patch(target, {
        "spec": {"x": {"$patch": "replace", "only": 3}, "$setElementOrder/containers": [{"name": "a"}]},
        "metadata": {"$deleteFromPrimitiveList/finalizers": ["f1"]},
    })
    assert patched == {"spec": {"containers": [{"name": "a", "image": "1"}], "x": {"only": 3}},
                       "metadata": {"finalizers": ["f2"]}}
    with pytest.raises(PatchError, match="merge key"):
        strategic_merge_patch(target, {"spec": {"containers": [{"image": "no-name"}]}})


@pytest.mark.parametrize("ops", [
    [{"op": "remove", "path": "/missing"}],
    [{"op": "replace", "path": "/a/5", "value": 1}],
    [{"op": "add", "path": "/a/01", "value": 1}],
    [{"op": "move", "from": "/a", "path": "/a/0"}],
    [{"op": "bogus", "path": "/a"}],
    [{"op": "add", "path": "no-slash", "value": 1}],
    {"op": "add"},
])
def test_json_patch_rejects(ops: Any) -> None:
    with pytest.raises(PatchError):
        json_patch({"a": [0]}, ops)


def test_json_patch_pointer_escapes_and_whole_document() -> None:
    assert json_patch({"a/b": {"c~d": 1}}, [{"op": "replace", "path": "/a~1b/c~0d", "value": 2}]) == {
        "a/b": {"c~d": 2}}
    assert json_patch({"a": 1}, [{"op": "replace", "path": "", "value": {"b": 2}}]) == {"b": 2}
