"""Metadata patches as JSON merge patches, with an optional resourceVersion precondition.

A merge patch sets the keys given and deletes those given as ``None``; everything else is left
alone, so concurrent writers of other keys do not clobber each other. With ``resource_version`` the
server applies the patch only to that version of the object, else answers 409 (``Conflict``): the
compare-and-swap the node lock and the handshake rely on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami.core.kube import raw

Obj = dict[str, Any]


def _metadata_patch(
    annotations: Mapping[str, str | None] | None,
    labels: Mapping[str, str | None] | None,
    resource_version: str | None,
) -> Obj:
    metadata: Obj = {}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if labels:
        metadata["labels"] = dict(labels)
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {"metadata": metadata}


def merge_patch(api_client: Any, path: str, patch: Obj) -> Obj:
    """PATCH ``path`` with a JSON merge patch; return the object as stored after it."""
    result: Obj = raw.request_json(api_client, "PATCH", path, body=patch, content_type=raw.MERGE_PATCH)
    return result


def patch_node_annotations(
    api_client: Any,
    node: str,
    annotations: Mapping[str, str | None],
    resource_version: str | None = None,
) -> Obj:
    """Set (or with ``None`` remove) annotations on a node; return the patched node.

    Raises ``NotFound``, ``Conflict`` (precondition failed) or ``ApiError``.
    """
    path = raw.resource_path("", "v1", "nodes", name=node)
    return merge_patch(api_client, path, _metadata_patch(annotations, None, resource_version))


def patch_pod_metadata(
    api_client: Any,
    namespace: str,
    name: str,
    *,
    annotations: Mapping[str, str | None] | None = None,
    labels: Mapping[str, str | None] | None = None,
    resource_version: str | None = None,
) -> Obj:
    """Set (or with ``None`` remove) annotations and labels on a pod; return the patched pod."""
    path = raw.resource_path("", "v1", "pods", namespace=namespace, name=name)
    return merge_patch(api_client, path, _metadata_patch(annotations, labels, resource_version))
