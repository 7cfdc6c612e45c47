"""What a write may set: request bodies checked against their URL, and the fields the server owns.

Pure functions on JSON objects (dicts), used by the store under its lock.
"""

from __future__ import annotations

from typing import Any

from hami.testing.kubeapi import errors
from hami.testing.kubeapi.resources import RESOURCES, ResourceType

Obj = dict[str, Any]


def type_of(obj: Obj) -> ResourceType:
    """The resource type of a whole object, by its apiVersion and kind."""
    for r in RESOURCES:
        if r.kind == obj.get("kind") and r.api_version == obj.get("apiVersion"):
            return r
    raise ValueError(f"no resource for apiVersion={obj.get('apiVersion')!r} kind={obj.get('kind')!r}")


def checked_body(rtype: ResourceType, namespace: str, obj: Any, url_name: str | None) -> Obj:
    """A POST or PUT body, checked against the URL and completed in place (the store takes it over)."""
    if not isinstance(obj, dict):
        raise errors.bad_request(f"the body of the request is not a {rtype.kind} object")
    new = obj
    meta = new.get("metadata")
    if meta is None:
        meta = new["metadata"] = {}
    if not isinstance(meta, dict):
        raise errors.bad_request("metadata must be an object")
    if url_name is not None and meta.get("name") != url_name:
        raise errors.bad_request(
            f"the name of the object ({meta.get('name')}) does not match the name on the URL ({url_name})"
        )
    if rtype.namespaced:
        if meta.get("namespace", namespace) != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    new["apiVersion"], new["kind"] = rtype.api_version, rtype.kind
    return new


def keep_server_fields(rtype: ResourceType, current: Obj, new: Obj, subresource: str) -> Obj:
    """Fields a write cannot change: server-set metadata, and status/spec split by subresource.

    A write to the main resource keeps the stored status and a write to `status` changes only
    status, as the real API does for types with a status subresource; `binding` changes both.
    Copies the levels it changes (`new` may share them with the stored object).
    """
    new = {**new}
    meta = new["metadata"] = {**new["metadata"]}
    for field in ("uid", "creationTimestamp", "deletionTimestamp", "generation"):
        if field in current["metadata"]:
            meta[field] = current["metadata"][field]
        else:
            meta.pop(field, None)
    meta["namespace"] = current["metadata"].get("namespace")
    if not rtype.namespaced:
        meta.pop("namespace")
    new["apiVersion"], new["kind"] = rtype.api_version, rtype.kind
    meta["resourceVersion"] = current["metadata"]["resourceVersion"]
    if subresource == "status":
        merged = {**current, "metadata": {**current["metadata"]}}
        if "status" in new:
            merged["status"] = new["status"]
        else:
            merged.pop("status", None)
        return merged
    if not subresource and "status" in rtype.subresources:
        if "status" in current:
            new["status"] = current["status"]
        else:
            new.pop("status", None)
    return new
