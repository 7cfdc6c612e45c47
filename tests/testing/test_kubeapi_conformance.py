"""The API emulator against the real kube-apiserver: the same requests to both, and the status codes
and the fields our code reads compared. Where they differ the emulator is wrong (fix it, not this).

Each scenario runs on a fresh emulator (a history of 5 changes, so that an old resourceVersion
expires) and on the session's real control plane (restarted when the scenario needs it), in a
namespace of its own there. The 410 scenario restarts kube-apiserver."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from hami.testing.controlplane import ControlPlane
from hami.testing.kubeapi import KubeAPIServer

pytestmark = pytest.mark.slow
Obj = dict[str, Any]
MERGE, STRATEGIC, JSONPATCH = (
    "application/merge-patch+json", "application/strategic-merge-patch+json", "application/json-patch+json",
)  # fmt: skip
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
_namespaces = itertools.count()


class Api:
    """One server, one namespace: raw requests, (status, decoded body) back."""

    def __init__(
        self, url: str, session: requests.Session, namespace: str, expire: Callable[[], object] = lambda: None
    ) -> None:
        self.url, self.s, self.ns = url, session, namespace
        self.expire = expire  # the history behind the current resourceVersion made unavailable

    def call(self, method: str, path: str, body: Any = None, ctype: str = "application/json",
             accept: str = "application/json", **params: str) -> tuple[int, Obj]:  # fmt: skip
        path = path.replace("{ns}", self.ns)
        data = None if body is None else json.dumps(body)
        reply = self.s.request(method, self.url + path, data=data, params=params, timeout=30,
                               headers={"Content-Type": ctype, "Accept": accept})  # fmt: skip
        try:
            decoded: Obj = reply.json()
        except ValueError:
            decoded = {"raw": reply.text}
        return reply.status_code, decoded

    def watch(self, path: str, events: int, **params: str) -> list[Obj]:
        """The first ``events`` events of a watch (or fewer, when the server ends it)."""
        params = {"watch": "true", "timeoutSeconds": "10", **params}
        url = self.url + path.replace("{ns}", self.ns)
        with self.s.get(url, params=params, stream=True, timeout=30) as r:
            out = []
            for line in r.iter_lines():
                if line:
                    out.append(json.loads(line))
                if len(out) == events:
                    break
            return out

    def pod(self, name: str, labels: dict[str, str] | None = None, node: str = "") -> Obj:
        spec: Obj = {"containers": [{"name": n, "image": "busybox"} for n in ("main", "side")]}
        if node:
            spec["nodeName"] = node
        meta = {"name": name, "namespace": self.ns, "labels": labels or {}}
        status, body = self.call("POST", "/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod",
                                                                          "metadata": meta, "spec": spec})
        assert status == 201, body
        return body


@pytest.fixture
def both(control_plane: ControlPlane) -> Iterator[tuple[Api, Api]]:
    """(emulator, real) for one scenario."""
    ns = f"conformance-{next(_namespaces)}"
    with control_plane.session() as s, KubeAPIServer(history=5) as emulator, requests.Session() as es:
        # the chart's webhook (when a test installed it) leaves this namespace alone
        meta = {"name": ns, "labels": {"hami.io/webhook": "ignore"}}
        created = s.post(control_plane.url + "/api/v1/namespaces", json={"metadata": meta}, timeout=30)
        assert created.status_code == 201, created.text
        # the emulator's history holds 5 changes; kube-apiserver's watch cache starts again at the
        # current resourceVersion when it restarts (compacting etcd alone leaves the cache serving)
        yield Api(emulator.url, es, ns), Api(control_plane.url, s, ns, control_plane.restart_apiserver)


def same(both: tuple[Api, Api], scenario: Callable[[Api], Any]) -> Any:
    """``scenario`` on both servers; they must give the same answer, which is returned."""
    emulated, real = (scenario(api) for api in both)
    assert emulated == real, f"emulator: {emulated!r}\nreal:     {real!r}"
    return real


def test_merge_patch(both: tuple[Api, Api]) -> None:
    def scenario(api: Api) -> Any:
        api.pod("p", {"a": "1", "b": "2"})
        status, body = api.call("PATCH", "/api/v1/namespaces/{ns}/pods/p",
                                {"metadata": {"labels": {"a": None, "c": "3"}, "annotations": {"x": "y"}}},
                                MERGE)  # fmt: skip
        return status, body["metadata"]["labels"], body["metadata"]["annotations"]

    assert same(both, scenario) == (200, {"b": "2", "c": "3"}, {"x": "y"})


def test_strategic_merge_patch_merges_containers_by_name(both: tuple[Api, Api]) -> None:
    def scenario(api: Api) -> Any:
        api.pod("p")
        patch = {"spec": {"containers": [{"name": "side", "image": "busybox:1.36"}]}}
        status, body = api.call("PATCH", "/api/v1/namespaces/{ns}/pods/p", patch, STRATEGIC)
        return status, [(c["name"], c["image"]) for c in body["spec"]["containers"]]

    assert same(both, scenario) == (200, [("main", "busybox"), ("side", "busybox:1.36")])


def test_json_patch_and_a_failed_test_operation(both: tuple[Api, Api]) -> None:
    def scenario(api: Api) -> Any:
        api.pod("p", {"a": "1"})
        ops = [{"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}},
               {"op": "replace", "path": "/metadata/labels/a", "value": "2"}]  # fmt: skip
        ok, body = api.call("PATCH", "/api/v1/namespaces/{ns}/pods/p", ops, JSONPATCH)
        failed, refused = api.call("PATCH", "/api/v1/namespaces/{ns}/pods/p",
                                   [{"op": "test", "path": "/metadata/labels/a", "value": "1"}], JSONPATCH)
        return ok, body["metadata"]["labels"], body["metadata"]["annotations"], failed, refused.get("kind")

    assert same(both, scenario)[0] == 200


def test_conflicts_409(both: tuple[Api, Api]) -> None:
    def scenario(api: Api) -> Any:
        pod = api.pod("p")
        again = api.call("POST", "/api/v1/namespaces/{ns}/pods", {**pod, "metadata": {"name": "p"}})
        api.call("PATCH", "/api/v1/namespaces/{ns}/pods/p", {"metadata": {"labels": {"x": "1"}}}, MERGE)
        stale_put = api.call("PUT", "/api/v1/namespaces/{ns}/pods/p", pod)
        stale_patch = api.call("PATCH", "/api/v1/namespaces/{ns}/pods/p", {"metadata": {
            "resourceVersion": pod["metadata"]["resourceVersion"], "labels": {"y": "2"}}}, MERGE)  # fmt: skip
        answers = (again, stale_put, stale_patch)
        return [(code, body.get("reason"), body.get("code")) for code, body in answers]

    conflict = (409, "Conflict", 409)
    assert same(both, scenario) == [(409, "AlreadyExists", 409), conflict, conflict]


def test_watch_from_an_expired_resource_version_is_410(both: tuple[Api, Api]) -> None:
    def scenario(api: Api) -> Any:
        for i in range(6):
            api.pod(f"p{i}")
        api.expire()
        (event,) = api.watch("/api/v1/namespaces/{ns}/pods", 1, resourceVersion="1")
        obj = event["object"]
        return event["type"], obj["kind"], obj["code"], obj["reason"]

    assert same(both, scenario) == ("ERROR", "Status", 410, "Expired")


ANNOTATIONS = {"hami.io/vgpu-node": "n1", "hami.io/bind-phase": "allocating"}


def test_binding_copies_its_annotations_and_a_second_binding_conflicts(both: tuple[Api, Api]) -> None:
    def scenario(api: Api) -> Any:
        api.pod("p")
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": "p", "annotations": ANNOTATIONS},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}  # fmt: skip
        bound = api.call("POST", "/api/v1/namespaces/{ns}/pods/p/binding", binding)[0]
        _, pod = api.call("GET", "/api/v1/namespaces/{ns}/pods/p")
        again, body = api.call("POST", "/api/v1/namespaces/{ns}/pods/p/binding", binding)
        return bound, pod["spec"]["nodeName"], pod["metadata"]["annotations"], again, body.get("reason")

    assert same(both, scenario) == (201, "n1", ANNOTATIONS, 409, "Conflict")


def test_field_validation_errors(both: tuple[Api, Api]) -> None:
    def scenario(api: Api) -> Any:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "bogus": 1}
        path = "/api/v1/namespaces/{ns}/configmaps"
        strict, refused = api.call("POST", path, body, fieldValidation="Strict")
        bad_name = api.call("POST", "/api/v1/namespaces/{ns}/configmaps",
                            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}})
        causes = [c.get("field") for c in (bad_name[1].get("details") or {}).get("causes") or []]
        return strict, refused.get("reason"), 'unknown field "bogus"' in refused.get("message", ""), \
            bad_name[0], bad_name[1].get("reason"), causes

    assert same(both, scenario) == (400, "BadRequest", True, 422, "Invalid", ["metadata.name"])


def test_table_output(both: tuple[Api, Api]) -> None:
    def scenario(api: Api) -> Any:
        api.pod("p")
        status, table = api.call("GET", "/api/v1/namespaces/{ns}/pods", accept=TABLE)
        columns = [c["name"] for c in table["columnDefinitions"] if c.get("priority", 0) == 0]
        rows = [(r["cells"][0], len(r["cells"])) for r in table["rows"]]
        return status, table["kind"], columns, rows

    got = same(both, scenario)
    assert got[2][:3] == ["Name", "Ready", "Status"]


def test_watch_bookmarks_end_the_initial_events(both: tuple[Api, Api]) -> None:
    def scenario(api: Api) -> Any:
        api.pod("a")
        api.pod("b")
        events = api.watch("/api/v1/namespaces/{ns}/pods", 3, sendInitialEvents="true",
                           allowWatchBookmarks="true", resourceVersionMatch="NotOlderThan")  # fmt: skip
        last = events[-1]["object"]["metadata"]
        initial = sorted(e["object"]["metadata"].get("name", "") for e in events[:2])
        end = (last.get("annotations") or {}).get("k8s.io/initial-events-end")
        return [e["type"] for e in events], initial, end, bool(last.get("resourceVersion"))

    assert same(both, scenario) == (["ADDED", "ADDED", "BOOKMARK"], ["a", "b"], "true", True)


def test_label_and_field_selectors(both: tuple[Api, Api]) -> None:
    def scenario(api: Api) -> Any:
        api.pod("web-1", {"app": "web", "tier": "front"}, node="n1")
        api.pod("web-2", {"app": "web", "tier": "back"})
        api.pod("db-1", {"app": "db"}, node="n1")

        def names(**params: str) -> Any:
            status, body = api.call("GET", "/api/v1/namespaces/{ns}/pods", **params)
            return status, sorted(i["metadata"]["name"] for i in body.get("items", []))

        return [
            names(labelSelector="app=web"),
            names(labelSelector="app in (web,db),tier!=front"),
            names(labelSelector="!tier"),
            names(fieldSelector="spec.nodeName=n1"),
            names(fieldSelector="spec.nodeName="),
            names(fieldSelector="metadata.name=web-2,status.phase=Pending"),
            names(labelSelector="app=web", fieldSelector="spec.nodeName!=n1"),
            names(fieldSelector="spec.bogus=1")[0],
        ]

    got = same(both, scenario)
    assert got[0] == (200, ["web-1", "web-2"]) and got[-1] == 400
