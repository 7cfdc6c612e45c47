"""The live Filter (§4.1) around the pure core: wait for the cache, decide, reserve, patch the pod.

``filter_pod`` and ``commit`` run under the state lock, so concurrent filters never hand out the
same capacity; the pod patch runs outside it and is undone if it fails.

Section signs (§) refer to docs/design/scheduler.md.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

from hami.core import annotations as ann
from hami.core import klog
from hami.core.codec.mig import encode_mig_allocations
from hami.core.codec.pod_devices import encode_pod_devices
from hami.core.kube import errors
from hami.core.kube.patches import patch_pod_metadata
from hami.scheduler.engine import reasons as r
from hami.scheduler.engine.decision import FilterConfig, FilterResult, commit, filter_pod
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.engine.ranking import Ranker
from hami.scheduler.engine.requests import pod_requests
from hami.scheduler.extender.events import PodEvents
from hami.scheduler.extender.metrics import failure_codes
from hami.scheduler.extender.state import ClusterState, meta_field

log = klog.get_logger(__name__)

Obj = dict[str, Any]
NOT_SYNCED = "context cancelled"


class FilterService:
    def __init__(
        self,
        state: ClusterState,
        api_client: Any,
        events: PodEvents,
        config: FilterConfig,
        *,
        sync_wait: float = 25.0,
    ) -> None:
        self.state = state
        self.api = api_client
        self.events = events
        self.config = config
        self.sync_wait = sync_wait
        self.metrics = state.metrics
        self.ranks = Ranker()  # used under the state lock

    def filter(self, pod: Obj, node_names: Sequence[str]) -> Obj:
        """ExtenderFilterResult for ``pod`` among ``node_names``."""
        started = time.monotonic()
        outcome = "error"
        try:
            reply, outcome = self._filter(pod, list(node_names))
            return reply
        finally:
            self.metrics.filter_duration.labels(outcome).observe(time.monotonic() - started)

    def _filter(self, pod: Obj, names: list[str]) -> tuple[Obj, str]:
        name = meta_field(pod, "name")
        reqs, _ = pod_requests(pod, self.config.nvidia)
        if not any(req is not None for req in reqs):
            return {"NodeNames": names, "FailedNodes": None, "Error": ""}, "passthrough"
        if not self.state.synced.wait(self.sync_wait):
            return {"Error": NOT_SYNCED}, "error"
        log.v(5).info("filter pod %s/%s over %d nodes", meta_field(pod, "namespace"), name, len(names))
        with self.state.lock:
            found = list(map(self.state.nodes.get, names))
            unregistered: list[str] = []
            nodes = cast(list[NodeState], found)
            if None in found:
                unregistered = [n for n, node in zip(names, found, strict=True) if node is None]
                nodes = [node for node in found if node is not None]
            result = filter_pod(
                pod, nodes, self.state.usage, self.state.quotas, self.config,
                unregistered=unregistered, ranks=self.ranks,
            )
            if result.node is not None:
                commit(result, self.state.usage, self.state.quotas)
            if klog.v(4):
                self._log_verdicts(pod, names, result)
        if result.error is not None:
            self.events.filtering(pod, result.events(len(names)))
            return {"Error": result.error}, "error"
        for reason in result.failed.values():
            for code in failure_codes(reason):
                self.metrics.filter_failures.labels(code).inc()
        if result.node is None:
            self.metrics.pods_unschedulable.inc()
            self.events.filtering(pod, result.events(len(names)), result.failed)
            return {"NodeNames": None, "FailedNodes": dict(result.failed), "Error": ""}, "unschedulable"
        error = self._patch(pod, result)
        if error:
            return {"Error": error}, "error"
        self.events.filtering(pod, result.events(len(names)))
        if klog.v(2):
            log.info(
                "pod %s: chose node %s, scores %s",
                name,
                result.node,
                ", ".join(f"{n}:{s:.2f}" for n, s in result.fits),
            )
        return {"NodeNames": [result.node], "FailedNodes": dict(result.failed), "Error": ""}, "fit"

    def _patch(self, pod: Obj, result: FilterResult) -> str:
        assert result.node is not None and result.reservation is not None
        devices = encode_pod_devices(result.devices)
        annotations: dict[str, str | None] = {
            ann.POD_VGPU_NODE: result.node,
            ann.POD_VGPU_TIME: str(int(time.time())),
            ann.POD_DEVICES_TO_ALLOCATE: devices,
            ann.POD_DEVICES_ALLOCATED: devices,
        }
        if result.mig:  # §2.1: only when MIG placements were chosen
            annotations[ann.POD_MIG_ALLOCATIONS] = encode_mig_allocations(result.mig)
        namespace, name = meta_field(pod, "namespace"), meta_field(pod, "name")
        try:
            patch_pod_metadata(
                self.api, namespace, name, annotations=annotations, labels={ann.POD_VGPU_NODE: result.node}
            )
        except errors.ApiError as err:
            self.metrics.api_errors.labels("pod_patch", errors.error_reason(err)).inc()
            with self.state.lock:
                if self.state.usage.get(result.reservation.uid) == result.reservation:
                    self.state.usage.remove(result.reservation.uid)
                    self.state.quotas.remove_usage(namespace, result.reservation.shares)
            message = f"patch pod annotations failed: {err}"
            log.error("pod %s/%s: %s", namespace, name, message)
            self.events.filtering(pod, [("Warning", message)])
            return message
        return ""

    def _log_verdicts(self, pod: Obj, names: list[str], result: FilterResult) -> None:
        """-v4 per-node lines, as in docs/guides/scheduler-debugging.md §3.2 (called under the state lock)."""
        name = meta_field(pod, "name")
        reqs, _ = pod_requests(pod, self.config.nvidia)
        requested = max((q.memreq for q in reqs if q is not None), default=0)
        for node in names:
            log.info("Filtering node %s for pod %s", node, name)
            reason = result.failed.get(node)
            if reason is None:
                continue
            detail = ""
            state = self.state.nodes.get(node)
            if state is not None and r.CARD_INSUFFICIENT_MEMORY in reason and requested:
                view = self.state.usage.view(state)
                free = max((view.devs[i].totalmem - view.umem[i] for i in view.nvidia), default=0)
                detail = f", requested {requested}Mi but available {free}Mi"
            # The line of docs/guides/scheduler-debugging.md §3.2 names the reason codes without HAMi's
            # "<n>/<m>" card counts.
            codes = ", ".join(r.parse_reason(reason)) or reason
            log.info("Node %s filtered out: %s%s", node, codes, detail)
