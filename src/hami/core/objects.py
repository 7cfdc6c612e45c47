"""Fields of Kubernetes objects as the API's JSON decodes them (plain dicts).

Objects reach the daemons from the API server, from informer caches and from anyone who can post
to an extender or webhook, so every accessor is total: a missing or mistyped ``metadata`` reads
as empty, a non-string name reads as ``""`` and a non-string annotation or label (or key) is
skipped. Nothing here raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_EMPTY: Mapping[str, Any] = {}


def metadata_of(obj: object) -> Mapping[str, Any]:
    """``metadata``, or an empty mapping when the object or its metadata is not a mapping."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta if isinstance(meta, Mapping) else _EMPTY


def meta_field(obj: object, key: str) -> str:
    """A string field of ``metadata`` (``name``, ``namespace``, ``uid``...); ``""`` otherwise."""
    value = metadata_of(obj).get(key)
    return value if isinstance(value, str) else ""


def name_of(obj: object) -> str:
    return meta_field(obj, "name")


def namespace_of(obj: object) -> str:
    return meta_field(obj, "namespace")


def uid_of(obj: object) -> str:
    return meta_field(obj, "uid")


def resource_version(obj: object) -> str:
    return meta_field(obj, "resourceVersion")


def object_key(obj: object) -> str:
    """client-go's ``MetaNamespaceKeyFunc``: ``namespace/name``, or ``name`` when cluster-scoped."""
    namespace, name = namespace_of(obj), name_of(obj)
    return f"{namespace}/{name}" if namespace else name


def _strings(raw: object) -> Mapping[str, str]:
    if not isinstance(raw, Mapping):
        return _EMPTY
    # The API server only ever sends strings: hand its mapping back as it is, without a copy.
    if all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        return raw
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


def annotations_of(obj: object) -> Mapping[str, str]:
    """``metadata.annotations``, string entries only (read-only: it may be the object's own)."""
    return _strings(metadata_of(obj).get("annotations"))


def labels_of(obj: object) -> Mapping[str, str]:
    """``metadata.labels``, string entries only (read-only: it may be the object's own)."""
    return _strings(metadata_of(obj).get("labels"))
