"""The device plugin's last step, for nodes where no kubelet runs: once a GPU pod is bound to one
of them, what ``hami-device-plugin`` does after kubelet's Allocate
(docs/design/node-agent-device-plugin.md §C.7): ``hami.io/bind-phase: success`` on the pod, then the
node lock released with the plugin's own
``NodeOps.release_node_lock`` (owner check, resourceVersion, 409 retried on a fresh read).

    with Allocations(api_client, nodes={"gpu-1"}) as done:   # a pod informer on the real server
        ...
        done.count                                           # pods completed so far

Without it every bound pod would keep its node locked until the lock expires (5 minutes), as on a
node whose device plugin is down.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Collection
from types import TracebackType
from typing import Any

from hami.core import annotations as ann
from hami.core.kube import errors
from hami.core.kube.informer import Informer
from hami.core.objects import annotations_of, name_of, namespace_of
from hami.deviceplugin.kubeops import NodeOps

Obj = dict[str, Any]


class Allocations:
    def __init__(self, api_client: Any, nodes: Collection[str] | None = None, workers: int = 8) -> None:
        """``nodes``: the nodes stood in for (None: every node); ``workers`` threads, as the plugins
        of many nodes work at once."""
        self.ops = NodeOps(api_client)
        self.nodes = None if nodes is None else set(nodes)
        self.informer = Informer(api_client, ("", "v1", "pods"))
        self.informer.add_handler(self._seen, lambda _old, new: self._seen(new))
        self._queue: queue.Queue[Obj | None] = queue.Queue()
        self._done: set[str] = set()
        self._lock = threading.Lock()
        self.count = 0
        self.errors: list[str] = []
        self._workers = [
            threading.Thread(target=self._run, name=f"allocations-{i}", daemon=True) for i in range(workers)
        ]

    def __enter__(self) -> Allocations:
        for worker in self._workers:
            worker.start()
        self.informer.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.informer.stop()
        for _ in self._workers:
            self._queue.put(None)
        for worker in self._workers:
            worker.join(timeout=30)

    def _seen(self, pod: Obj) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (self.nodes is not None and node not in self.nodes):
            return
        if annotations_of(pod).get(ann.POD_BIND_PHASE) != ann.BIND_PHASE_ALLOCATING:
            return
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        with self._lock:
            if uid in self._done:
                return
            self._done.add(uid)
        self._queue.put(pod)

    def _run(self) -> None:
        while (pod := self._queue.get()) is not None:
            ns, name, node = namespace_of(pod), name_of(pod), pod["spec"]["nodeName"]
            try:
                self.ops.patch_pod_annotations(ns, name, {ann.POD_BIND_PHASE: ann.BIND_PHASE_SUCCESS})
                self.ops.release_node_lock(node, ns, name)
            except (errors.ApiError, RuntimeError) as err:
                self.errors.append(f"{ns}/{name} on {node}: {err}")
                continue
            with self._lock:
                self.count += 1
