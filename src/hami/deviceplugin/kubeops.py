"""The few API-server calls the plugin makes, through the core Kubernetes access (plain JSON dicts).

Every write is a JSON merge patch of ``metadata.annotations`` (§C.4, §C.7; Allocate's also sets the
``hami.io/vgpu-node`` pod label, see ``allocator``), optionally guarded by
``metadata.resourceVersion`` so that the API server refuses it (409) when the object changed.

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

from typing import Any

from hami.core import annotations as ann
from hami.core.kube import errors, patches, raw
from hami.core.objects import annotations_of, resource_version

Obj = dict[str, Any]


class NodeOps:
    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def get_node(self, name: str) -> Obj:
        obj: Obj = raw.request_json(self.api_client, "GET", raw.resource_path("", "v1", "nodes", name=name))
        return obj

    def get_pod(self, namespace: str, name: str) -> Obj:
        path = raw.resource_path("", "v1", "pods", namespace=namespace, name=name)
        obj: Obj = raw.request_json(self.api_client, "GET", path)
        return obj

    def patch_node_annotations(
        self, name: str, values: dict[str, str | None], resource_version: str | None = None
    ) -> Obj:
        return patches.patch_node_annotations(self.api_client, name, values, resource_version)

    def patch_pod_annotations(
        self, namespace: str, name: str, values: dict[str, str | None], labels: dict[str, str] | None = None
    ) -> Obj:
        return patches.patch_pod_metadata(self.api_client, namespace, name, annotations=values, labels=labels)

    def release_node_lock(
        self, node: str, namespace: str, pod: str, known: Obj | None = None, attempts: int = 5
    ) -> bool:
        """docs/design/scheduler-annotations.md §1.5 ReleaseNodeLock without skipping the owner check; True if
        it was removed.

        A lock owned by another pod is left alone. The delete carries the resourceVersion it read, so a
        concurrent change makes it fail with 409 and the check is repeated on a fresh read. ``known``
        is a node object read moments ago, tried first to save a GET.
        """
        suffix = f",{namespace},{pod}"
        last: Exception | None = None
        for attempt in range(attempts):
            obj = known if attempt == 0 and known is not None else self.get_node(node)
            value = annotations_of(obj).get(ann.NODE_LOCK)
            if value is None:
                return False
            if "," in value and not value.endswith(suffix):
                return False
            try:
                self.patch_node_annotations(node, {ann.NODE_LOCK: None}, resource_version(obj))
                return True
            except errors.Conflict as exc:
                last = exc
        raise RuntimeError(f"failed to release node lock on {node}: {last}")

