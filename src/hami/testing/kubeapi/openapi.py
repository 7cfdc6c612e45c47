"""OpenAPI v3 discovery and server-side field validation, from the Kubernetes JSON schemas that
``kubernetes-validate`` ships.

kubectl (1.27+) validates what it sends by asking the server: it reads ``/openapi/v3``, finds the
resource's PATCH operation with a ``fieldValidation`` query parameter, then sends
``?fieldValidation=Strict`` and lets the server refuse unknown or ill-typed fields. So the
emulator serves, per group-version, its paths with those operations and the kinds' schemas
(references rewritten to ``#/components/schemas``), and checks bodies against the same schemas
when asked: an unknown field is 400 ``strict decoding error``, a wrong type 422 ``Invalid``, as the
API server answers. Custom resources (cert-manager's, the Prometheus Operator's) have no schema
there and pass, as a CRD without a structural schema would.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

import kubernetes_validate
from kubernetes_validate import utils as kv_utils

from hami.testing.kubeapi import errors
from hami.testing.kubeapi.resources import RESOURCES, ResourceType

Obj = dict[str, Any]
SCHEMA_VERSION = "1.31"
# References between definitions, as _definitions.json writes them (the per-kind files use the
# absolute form).
_DEFS_REF = "#/$defs/"


def gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


@functools.lru_cache(maxsize=1)
def _definitions() -> dict[str, Any]:
    schema_dir = f"v{SCHEMA_VERSION}.0-local-strict"
    doc: dict[str, Any] = kv_utils.schema_contents(
        f"kubernetes-json-schema/{schema_dir}/_definitions.json", SCHEMA_VERSION
    )
    defs: dict[str, Any] = doc["$defs"]
    return defs


def _gvk_name(rtype: ResourceType) -> str | None:
    """The definitions key of a type (``io.k8s.api.core.v1.Pod``), by its group-version-kind."""
    for name, schema in _definitions().items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            if (gvk.get("group"), gvk.get("version"), gvk.get("kind")) == (
                rtype.group,
                rtype.version,
                rtype.kind,
            ):
                return name
    return None


def _openapi3(node: Any) -> Any:
    """JSON Schema 2020-12 as the files have it -> OpenAPI 3.0: local refs, nullable instead of null."""
    if isinstance(node, list):
        return [_openapi3(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and _DEFS_REF in value:
            out[key] = "#/components/schemas/" + value.split(_DEFS_REF, 1)[1]
        elif key == "type" and isinstance(value, list):
            kinds = [v for v in value if v != "null"]
            out[key] = kinds[0] if len(kinds) == 1 else kinds
            if "null" in value:
                out["nullable"] = True
        else:
            out[key] = _openapi3(value)
    return out


def _closure(names: list[str]) -> dict[str, Any]:
    defs = _definitions()
    seen: dict[str, Any] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen[name] = defs[name]
        text = json.dumps(defs[name])
        start = 0
        while (i := text.find(_DEFS_REF, start)) >= 0:
            end = text.index('"', i)
            todo.append(text[i + len(_DEFS_REF) : end])
            start = end
    return {name: _openapi3(schema) for name, schema in sorted(seen.items())}


_FIELD_VALIDATION = {
    "name": "fieldValidation",
    "in": "query",
    "description": "Ignore, Warn or Strict: what to do with unknown or duplicate fields",
    "schema": {"type": "string", "uniqueItems": True},
}


def _operations(rtype: ResourceType, schema_name: str | None) -> dict[str, Any]:
    gvk = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
    body = {"$ref": f"#/components/schemas/{schema_name}"} if schema_name else {"type": "object"}
    content = {"application/json": {"schema": body}}

    def op(verb: str, with_body: bool) -> dict[str, Any]:
        operation: dict[str, Any] = {
            "operationId": f"{verb}{rtype.kind}",
            "x-kubernetes-action": verb,
            "x-kubernetes-group-version-kind": gvk,
            "responses": {"200": {"description": "OK", "content": content}},
        }
        if with_body:
            operation["parameters"] = [_FIELD_VALIDATION]
            operation["requestBody"] = {"content": content, "required": True}
        return operation

    ns = "/namespaces/{namespace}" if rtype.namespaced else ""
    base = f"/{gv_path(rtype.group, rtype.version)}{ns}/{rtype.plural}"
    return {
        base: {"get": op("list", False), "post": op("post", True)},
        base + "/{name}": {
            "get": op("get", False),
            "put": op("put", True),
            "patch": op("patch", True),
            "delete": op("delete", False),
        },
    }


@functools.cache
def gv_document(group: str, version: str) -> bytes | None:
    """The OpenAPI v3 document of one group-version, encoded; None when the emulator serves none."""
    types = [r for r in RESOURCES if (r.group, r.version) == (group, version)]
    if not types:
        return None
    paths: dict[str, Any] = {}
    names = []
    for rtype in types:
        name = _gvk_name(rtype)
        if name:
            names.append(name)
        paths.update(_operations(rtype, name))
    doc = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.31.0"},
        "paths": paths,
        "components": {"schemas": _closure(names)},
    }
    return json.dumps(doc).encode()


@functools.lru_cache(maxsize=1)
def root_document() -> bytes:
    """``/openapi/v3``: every group-version's document, addressed by content hash as the API server does."""
    paths = {}
    for group, version in sorted({(r.group, r.version) for r in RESOURCES}):
        doc = gv_document(group, version) or b""
        digest = hashlib.sha512(doc).hexdigest()[:64].upper()
        path = gv_path(group, version)
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return json.dumps({"paths": paths}).encode()


def check_fields(rtype: ResourceType, obj: Any, directive: str) -> None:
    """Server-side field validation of a body (``fieldValidation=Strict`` refuses, others pass)."""
    if directive != "Strict" or not isinstance(obj, dict):
        return
    whole = {**obj, "apiVersion": rtype.api_version, "kind": rtype.kind}
    try:
        kubernetes_validate.validate(whole, SCHEMA_VERSION, strict=True)
    except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError):
        return
    except kubernetes_validate.ValidationError as err:
        where = ".".join(str(p) for p in err.path)
        if err.validator == "additionalProperties":
            unknown = err.message.split("'")[1] if "'" in err.message else "?"
            field = f"{where}.{unknown}" if where else unknown
            raise errors.bad_request(f'strict decoding error: unknown field "{field}"') from None
        name = str((obj.get("metadata") or {}).get("name", ""))
        raise errors.invalid(rtype.kind, name, where or "<root>", err.message) from None
