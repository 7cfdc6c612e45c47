"""Request routing and the non-streaming verbs: pure functions from a parsed request to a reply."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hami.testing.kubeapi import errors, openapi, resources
from hami.testing.kubeapi.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from hami.testing.kubeapi.resources import BY_PATH, ResourceType
from hami.testing.kubeapi.selectors import combined
from hami.testing.kubeapi.store import Change, Obj, Store

VERSION = {
    "major": "1", "minor": "31", "gitVersion": "v1.31.0", "gitCommit": "hami-kubeapi-emulator",
    "gitTreeState": "clean", "buildDate": "2024-08-13T00:00:00Z", "goVersion": "go1.22.5",
    "compiler": "gc", "platform": "linux/amd64",
}
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
# Types whose DELETE answers the deleted object; every other type answers a Status Success.
_RETURN_DELETED = frozenset({"pods", "namespaces", "resourcequotas"})


@dataclass(frozen=True)
class Route:
    rtype: ResourceType
    namespace: str | None  # None: all namespaces (lists/watches) or a cluster-scoped resource
    name: str | None
    subresource: str

    @property
    def ns(self) -> str:
        return self.namespace or ""


def discovery(segments: list[str], server_address: str) -> dict[str, Any] | bytes | None:
    """The discovery document at this path (an object, or bytes already encoded), or None when the
    path is not a discovery path."""
    match segments:
        case []:
            return root_paths()
        case ["openapi", "v3"]:
            return openapi.root_document()
        case ["openapi", "v3", "api", version]:
            return openapi.gv_document("", version) or _missing("/".join(segments))
        case ["openapi", "v3", "apis", group, version]:
            return openapi.gv_document(group, version) or _missing("/".join(segments))
        case ["version"]:
            return VERSION
        case ["healthz" | "livez" | "readyz"]:
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 200}
        case ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}
        case ["api", version]:
            return resources.resource_list("", version) or _missing("/".join(segments))
        case ["apis"]:
            return resources.group_list()
        case ["apis", group]:
            return resources.group_doc(group) or _missing("/".join(segments))
        case ["apis", group, version]:
            return resources.resource_list(group, version) or _missing("/".join(segments))
    return None


def root_paths() -> dict[str, Any]:
    """``/``: the paths the server answers, as a kube-apiserver lists them (``{"paths": [...]}``)."""
    versions = sorted({(r.group, r.version) for r in resources.RESOURCES})
    paths = {"/api", "/apis", "/healthz", "/livez", "/readyz", "/openapi/v3", "/version"}
    for group, version in versions:
        paths.update((f"/apis/{group}", f"/apis/{group}/{version}") if group else (f"/api/{version}",))
    return {"paths": sorted(paths)}


def _missing(path: str) -> dict[str, Any]:
    raise errors.ApiError(404, f"the server could not find the requested resource ({path})", "NotFound")


def parse_route(segments: list[str]) -> Route:
    """`/api/v1/...` or `/apis/G/V/...` after the prefix → a Route; 404 for anything unknown."""
    if segments[:1] == ["api"] and len(segments) >= 2:
        group, version, rest = "", segments[1], segments[2:]
    elif segments[:1] == ["apis"] and len(segments) >= 3:
        group, version, rest = segments[1], segments[2], segments[3:]
    else:
        raise errors.ApiError(404, "the server could not find the requested resource", "NotFound")
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces" and (
        (group, version, rest[2]) in BY_PATH or (group, rest[2:]) == ("", ["bindings"])
    ):
        namespace, rest = rest[1], rest[2:]
    if namespace is not None and (group, rest) == ("", ["bindings"]):
        # POST namespaces/NS/bindings is the same binding as pods/NAME/binding, named by the body.
        return Route(BY_PATH[("", "v1", "pods")], namespace, None, "bindings")
    rtype = BY_PATH.get((group, version, rest[0])) if rest else None
    if rtype is None or len(rest) > 3 or (rtype.namespaced is False and namespace is not None):
        raise errors.ApiError(404, "the server could not find the requested resource", "NotFound")
    name = rest[1] if len(rest) >= 2 else None
    sub = rest[2] if len(rest) == 3 else ""
    if sub and sub not in rtype.subresources:
        raise errors.ApiError(404, "the server could not find the requested resource", "NotFound")
    if rtype.namespaced and name is not None and namespace is None:
        raise errors.ApiError(404, "the server could not find the requested resource", "NotFound")
    return Route(rtype, namespace, name, sub)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise errors.bad_request(f"the body of the request was in an unknown format: {exc}") from exc


def _item_key(item: Obj) -> list[str]:
    return [item["metadata"].get("namespace", ""), item["metadata"]["name"]]


def _decode_continue(token: str) -> tuple[int, list[str]]:
    try:
        state = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(state["rv"]), [str(part) for part in state["start"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from exc


def list_reply(store: Store, route: Route, query: dict[str, str]) -> Obj:
    """A list; `limit` pages it with a `continue` token (pages show the live state, ordered by key)."""
    rtype = route.rtype
    match = combined(rtype, query.get("labelSelector", ""), query.get("fieldSelector", ""))
    entries, rv = store.snapshot(rtype, route.namespace, match)
    items = [entry.obj for entry in entries]
    if query.get("continue"):
        rv, start = _decode_continue(query["continue"])
        items = [item for item in items if _item_key(item) > start]
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    raw_limit = query.get("limit", "")
    if raw_limit and not raw_limit.isdigit():
        raise errors.bad_request(f"invalid limit: {raw_limit!r}")
    limit = int(raw_limit or 0)
    if 0 < limit < len(items):
        meta["remainingItemCount"] = len(items) - limit
        items = items[:limit]
        state = {"rv": rv, "start": _item_key(items[-1])}
        meta["continue"] = base64.urlsafe_b64encode(json.dumps(state).encode()).decode()
    # The real API leaves apiVersion and kind off list items (copies: stored objects never change).
    bare = [{k: v for k, v in item.items() if k not in ("apiVersion", "kind")} for item in items]
    return {"apiVersion": rtype.api_version, "kind": rtype.list_kind, "metadata": meta, "items": bare}


def patch(store: Store, route: Route, content_type: str, body: bytes, field_validation: str = "") -> Change:
    document = _json(body)
    name = route.name or ""
    checked = _checked(route.rtype, field_validation)
    if content_type == JSON_PATCH:
        def change(current: Obj) -> Obj:
            try:
                result = json_patch(current, document)
            except PatchError as exc:
                raise errors.invalid(route.rtype.kind, name, "patch", str(exc)) from exc
            if not isinstance(result, dict):
                raise errors.invalid(route.rtype.kind, name, "patch", "the result is not an object")
            return checked(result)
    elif content_type in (MERGE, STRATEGIC):
        if not isinstance(document, dict):
            raise errors.bad_request(f"the body of a {content_type} patch must be a JSON object")
        apply = merge_patch if content_type == MERGE else strategic_merge_patch

        def change(current: Obj) -> Obj:
            try:
                result = apply(current, document)
            except PatchError as exc:
                raise errors.invalid(route.rtype.kind, name, "patch", str(exc)) from exc
            return checked(dict(result))
    else:
        raise errors.ApiError(
            415, f"the body of the request was in an unknown format - accepted media types include: "
            f"{JSON_PATCH}, {MERGE}, {STRATEGIC}", "UnsupportedMediaType")
    return store.modify(route.rtype, route.ns, name, change, route.subresource)


def _checked(rtype: ResourceType, field_validation: str) -> Callable[[Obj], Obj]:
    """The identity on an object, after `fieldValidation=Strict` checked it (see openapi)."""

    def check(obj: Obj) -> Obj:
        openapi.check_fields(rtype, obj, field_validation)
        return obj

    return check


def bind(store: Store, route: Route, body: bytes) -> Obj:
    """POST pods/NAME/binding or bindings: assign the pod to a node once; answers Status Success."""
    binding = _json(body)
    if not isinstance(binding, dict):
        raise errors.bad_request("the body of the request is not a Binding object")
    meta = binding.get("metadata") or {}
    name = route.name or meta.get("name") or ""
    if not name:
        raise errors.invalid("Binding", "", "metadata.name", "Required value")
    if meta.get("name", name) != name:
        raise errors.bad_request("name in URL does not match name in Binding object")
    target = binding.get("target") or {}
    node = target.get("name")
    if not node:
        raise errors.invalid("Binding", name, "target.name", "Required value")

    def assign(stored: Obj) -> Obj:
        pod = copy.deepcopy(stored)
        if pod["metadata"].get("deletionTimestamp"):
            raise errors.conflict("pods/binding", "", name, f"pod {name} is being deleted, cannot be "
                                  "assigned to a host")
        bound = pod.get("spec", {}).get("nodeName")
        if bound:
            raise errors.conflict("pods/binding", "", name,
                                  f'pod {name} is already assigned to node "{bound}"')
        if meta.get("uid") and meta["uid"] != pod["metadata"]["uid"]:
            raise errors.conflict("pods/binding", "", name, "Precondition failed: UID in precondition: "
                                  f"{meta['uid']}, UID in object meta: {pod['metadata']['uid']}")
        pod.setdefault("spec", {})["nodeName"] = node
        if meta.get("annotations"):
            pod["metadata"].setdefault("annotations", {}).update(meta["annotations"])
        conditions = [c for c in pod.setdefault("status", {}).get("conditions", [])
                      if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                           "lastTransitionTime": pod["metadata"]["creationTimestamp"]})
        pod["status"]["conditions"] = conditions
        return pod

    store.modify(route.rtype, route.ns, name, assign, "binding")
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def serve(store: Store, method: str, route: Route, *, query: dict[str, str], content_type: str,
          body: bytes) -> tuple[int, Obj | bytes]:
    """Every verb except watch; returns (HTTP status, JSON body, as an object or encoded) or raises
    `errors.ApiError`."""
    rtype, ns, name = route.rtype, route.ns, route.name
    checked = _checked(rtype, query.get("fieldValidation", ""))
    if route.subresource == "log":  # GET is answered by the server, which knows where logs are
        raise errors.ApiError(405, f"the server does not allow {method} on pods/log", "MethodNotAllowed")
    if route.subresource == "bindings" and method == "POST":
        return 201, bind(store, route, body)
    if route.subresource == "bindings":
        raise errors.ApiError(405, f"the server does not allow {method} on bindings", "MethodNotAllowed")
    if name is None:
        if method == "GET":
            return 200, list_reply(store, route, query)
        if method == "POST":
            if rtype.namespaced and route.namespace is None:
                raise errors.ApiError(405, "the server does not allow this method on the requested "
                                      "resource", "MethodNotAllowed")
            return 201, store.create(rtype, ns, checked(_json(body))).obj_json
        if method == "DELETE":
            reply = list_reply(store, route, query)
            for item in reply["items"]:
                store.delete(rtype, item["metadata"].get("namespace", ""), item["metadata"]["name"])
            return 200, reply
    elif route.subresource == "binding":
        if method == "POST":
            return 201, bind(store, route, body)
    elif method == "GET":
        return 200, store.read(rtype, ns, name).obj_json
    elif method == "PUT":
        return 200, store.update(rtype, ns, name, checked(_json(body)), route.subresource).obj_json
    elif method == "PATCH":
        return 200, patch(store, route, content_type, body, query.get("fieldValidation", "")).obj_json
    elif method == "DELETE" and not route.subresource:
        options = _json(body) or {}
        precondition = (options.get("preconditions") or {}).get("resourceVersion") or ""
        gone = store.delete(rtype, ns, name, str(precondition))
        if rtype.key in _RETURN_DELETED:
            return 200, gone.obj_json
        details = {"name": name, "kind": rtype.plural, "uid": gone.obj["metadata"]["uid"]}
        if rtype.group:
            details["group"] = rtype.group
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                     "details": details}
    raise errors.ApiError(405, f"the server does not allow {method} on the requested resource",
                          "MethodNotAllowed")
