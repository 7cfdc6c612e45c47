"""The few API-server calls the plugin makes, as plain JSON dicts over the official client.

Every write is a JSON merge patch of ``metadata.annotations`` (spec §C.4, §C.7), optionally guarded by
``metadata.resourceVersion`` so the API server refuses it (409) when the object changed underneath.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from hami.core import annotations as ann

MERGE_PATCH = "application/merge-patch+json"


class NodeOps:
    def __init__(self, api_client: Any) -> None:
        self._core = client.CoreV1Api(api_client)

    def get_node(self, name: str) -> dict[str, Any]:
        resp = self._core.read_node(name, _preload_content=False)
        return dict(json.loads(resp.data))

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        resp = self._core.read_namespaced_pod(name, namespace, _preload_content=False)
        return dict(json.loads(resp.data))

    def patch_node_annotations(
        self, name: str, values: dict[str, str | None], resource_version: str | None = None
    ) -> None:
        meta: dict[str, Any] = {"annotations": values}
        if resource_version is not None:
            meta["resourceVersion"] = resource_version
        self._core.patch_node(name, {"metadata": meta}, _content_type=MERGE_PATCH, _preload_content=False)

    def patch_pod_annotations(self, namespace: str, name: str, values: dict[str, str | None]) -> None:
        self._core.patch_namespaced_pod(
            name,
            namespace,
            {"metadata": {"annotations": values}},
            _content_type=MERGE_PATCH,
            _preload_content=False,
        )

    def release_node_lock(self, node: str, namespace: str, pod: str, attempts: int = 5) -> bool:
        """scheduler.md §1.5 ReleaseNodeLock without skipping the owner check; True if it was removed.

        A lock owned by another pod is left alone. The delete carries the resourceVersion it read, so a
        concurrent change makes it fail with 409 and the check is repeated.
        """
        suffix = f",{namespace},{pod}"
        last: Exception | None = None
        for _ in range(attempts):
            obj = self.get_node(node)
            value = (obj.get("metadata", {}).get("annotations") or {}).get(ann.NODE_LOCK)
            if value is None:
                return False
            if "," in value and not value.endswith(suffix):
                return False
            try:
                self.patch_node_annotations(
                    node, {ann.NODE_LOCK: None}, obj["metadata"].get("resourceVersion")
                )
                return True
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
                last = exc
        raise RuntimeError(f"failed to release node lock on {node}: {last}")


def annotations_of(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("annotations") or {})
