"""POST /filter (§4.1) around the pure core: decode the pod once, wait for the cache, decide.

The pipeline is the same for both kinds of caller: the pod is decoded once (``pod_request``, which
also decides the pass-through of a pod that asks for no device), the filter waits for the cache,
and ``filter_pod`` decides under the state lock. The candidates and what happens to the verdict
differ:

- live (``NodeNames``): candidates are the registered nodes; ``commit`` reserves the capacity
  under the lock, so concurrent filters never hand out the same cards, and the allocation
  annotations HAMi patches onto the pod here are kept as the pod's ``Assignment`` for /bind to
  carry in the Binding (see ``state``): the filter writes nothing but its event.
- dry run (``Nodes``, §4.1 step 2, docs/design/scheduler.md §9.3): a caller configured with
  ``nodeCacheCapable: false``
  (Cluster Autoscaler asking "would this pod fit on a node like this template?") sends whole
  Node objects. Each is decoded from its own annotations with the register loop's decoder
  (``node_state``), its usage starts at zero, and the pod is scored exactly as the live filter
  does. Nothing is written: no event, no pod patch, no reservation, no quota usage; the
  namespace's quota is read as it stands. The answer names the single best node (a copy of the
  object the caller sent) in ``Nodes``, with ``FailedNodes`` for the others; a node whose
  annotations yield no device, or fail to decode, is ``node unregistered``. Its latency is
  recorded under ``simulated_<outcome>``.

Section signs (§) refer to docs/design/scheduler-filter.md.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

from hami.core import annotations as ann
from hami.core import klog, tracing
from hami.core import reasons as r
from hami.core.codec.mig import encode_mig_allocations
from hami.core.codec.pod_devices import encode_pod_devices
from hami.core.objects import annotations_of, name_of
from hami.scheduler.engine.decision import FilterConfig, FilterResult, commit, filter_pod
from hami.scheduler.engine.nodes import NodeState, node_state
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.ranking import Ranker
from hami.scheduler.engine.requests import PodRequest, pod_request
from hami.scheduler.engine.usage import UsageIndex
from hami.scheduler.extender.decisions import Recorder
from hami.scheduler.extender.events import PodEvents
from hami.scheduler.extender.metrics import INVALID_REQUEST, SIMULATED, dominant_code, failure_codes
from hami.scheduler.extender.state import Assignment, ClusterState

log = klog.get_logger(__name__)
# Failures that come before any device is tried: HAMi logs no NodeUnfitPod for them.
_NOT_FITTED = frozenset({r.NODE_UNREGISTERED, r.NODE_USAGE_UNAVAILABLE})

Obj = dict[str, Any]
NOT_SYNCED = "context cancelled"


def node_items(nodes: object) -> list[Mapping[str, Any]]:
    """The Node objects of an ExtenderArgs ``Nodes`` (a v1.NodeList; ``items`` read like Go does,
    case-insensitively). Raises ``ValueError`` when it is not a NodeList."""
    if not isinstance(nodes, Mapping):
        raise ValueError("Nodes must be a NodeList object")
    items = nodes.get("items")
    if items is None:
        items = next((v for k, v in nodes.items() if isinstance(k, str) and k.lower() == "items"), None)
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
        raise ValueError("Nodes.items must be a list of Node objects")
    return items


def _dry_result(
    nodes: Obj | None = None,
    names: Sequence[str] | None = None,
    failed: Mapping[str, str] | None = None,
    error: str = "",
) -> Obj:
    """A dry run's ExtenderFilterResult with every Go field, as HAMi marshals it."""
    return {
        "Nodes": nodes,
        "NodeNames": None if names is None else list(names),
        "FailedNodes": None if failed is None else dict(failed),
        "FailedAndUnresolvableNodes": None,
        "Error": error,
    }


def passthrough(names: Sequence[str] | None, nodes: Sequence[Mapping[str, Any]] | None) -> Obj:
    """§4.1 step 1, a pod that asks for no device: ``NodeNames`` echoed as HAMi does. A dry run
    also gets back the ``Nodes`` it sent (deliberately unlike HAMi, which answers ``Nodes`` null):
    a ``nodeCacheCapable: false`` caller reads only ``Nodes``, and would otherwise take the pod to
    fit nowhere."""
    if nodes is None:
        return {"NodeNames": list(names or ()), "FailedNodes": None, "Error": ""}
    return _dry_result({"metadata": {}, "items": [dict(n) for n in nodes]}, names=names)


def dry_run(
    request: PodRequest,
    nodes: Sequence[Mapping[str, Any]],
    quotas: QuotaManager | None,
    config: FilterConfig,
) -> tuple[Obj, str]:
    """(ExtenderFilterResult, outcome) of ``request`` over the supplied Node objects, each decoded
    from its own annotations with zero usage. The outcome is ``fit``, ``unschedulable`` or
    ``error``. Reads ``quotas``, mutates nothing."""
    states: list[NodeState] = []
    objects: dict[str, Mapping[str, Any]] = {}
    unregistered: list[str] = []
    for node in nodes:
        name = name_of(node)
        state = node_state(name, annotations_of(node))
        if not isinstance(state, NodeState):
            log.v(4).info("dry-run filter: node %s unregistered: %s", name, state.reason)
            unregistered.append(name)
            continue
        states.append(state)
        objects.setdefault(name, node)
    result = filter_pod(request, states, UsageIndex(), quotas, config, unregistered=unregistered)
    if result.error is not None:
        return _dry_result(error=result.error), "error"
    if result.node is None:
        return _dry_result(failed=result.failed), "unschedulable"
    best = copy.deepcopy(dict(objects[result.node]))
    return _dry_result({"metadata": {}, "items": [best]}, failed=result.failed), "fit"


def _annotations(result: FilterResult) -> dict[str, str]:
    """HAMi's filter-time pod annotations (docs/design/scheduler-annotations.md §2.1) for the chosen
    devices."""
    assert result.node is not None
    devices = encode_pod_devices(result.devices)
    annotations = {
        ann.POD_VGPU_NODE: result.node,
        ann.POD_VGPU_TIME: str(int(time.time())),
        ann.POD_DEVICES_TO_ALLOCATE: devices,
        ann.POD_DEVICES_ALLOCATED: devices,
    }
    if result.mig:  # §2.1: only when MIG placements were chosen
        annotations[ann.POD_MIG_ALLOCATIONS] = encode_mig_allocations(result.mig)
    return annotations


def _verdict(reply: Mapping[str, Any], outcome: str, candidates: int) -> tuple[str, dict[str, Any]]:
    """(refusal reason, span attributes) of a filter's reply: a pod that fits nowhere is refused
    with each node's reason, as its FilteringFailed event says."""
    failed = reply.get("FailedNodes") or {}
    chosen = reply.get("NodeNames") or [name_of(n) for n in (reply.get("Nodes") or {}).get("items", [])]
    attributes = {
        "hami.filter.candidates": candidates,
        "hami.filter.verdict": outcome,
        "hami.filter.node": ",".join(chosen),
        "hami.filter.failed_nodes": len(failed),
    }
    error = str(reply.get("Error") or "")
    if not error and not chosen:
        error = "no node fits: " + "; ".join(f"{node}: {why}" for node, why in sorted(failed.items()))
    return error, attributes


class FilterService:
    def __init__(
        self,
        state: ClusterState,
        api_client: Any,
        events: PodEvents,
        config: FilterConfig,
        *,
        sync_wait: float = 25.0,
        recorder: Recorder | None = None,
    ) -> None:
        self.state = state
        self.api = api_client
        self.events = events
        self.config = config
        self.sync_wait = sync_wait
        self.metrics = state.metrics
        self.ranks = Ranker()  # used under the state lock
        self.recorder = recorder

    def filter(
        self, pod: Obj, names: Sequence[str] | None, nodes: Sequence[Mapping[str, Any]] | None = None,
    ) -> Obj:
        """ExtenderFilterResult for ``pod`` among the registered ``names``, or, when the caller
        sent Node objects (``nodes``), a dry run over those."""
        started = time.monotonic()
        start_ns = tracing.now_ns()
        outcome = "error"
        span = None
        reply: Obj = {}
        try:
            request = pod_request(pod, self.config.nvidia)
            if request is None:
                outcome = "passthrough"
                return passthrough(names, nodes)
            span = tracing.pod_span("hami.scheduler.filter", pod, start_ns, admit=self.state.traces.admit)
            if not self.state.synced.wait(self.sync_wait):
                reply = {"Error": NOT_SYNCED} if nodes is None else _dry_result(error=NOT_SYNCED)
                return reply
            if nodes is None:
                reply, outcome = self._live(pod, request, list(names or ()))
            else:
                with self.state.lock:
                    reply, outcome = dry_run(request, nodes, self.state.quotas, self.config)
                if klog.v(2):
                    chosen = [name_of(n) for n in (reply.get("Nodes") or {}).get("items", [])]
                    log.info(
                        "dry-run filter pod %s/%s over %d nodes: %s, chose %s",
                        request.namespace, request.name, len(nodes), outcome, chosen,
                    )
            return reply
        finally:
            label = outcome if nodes is None else SIMULATED + outcome
            self.metrics.filter_duration.labels(label).observe(
                time.monotonic() - started, tracing.exemplar(span)
            )
            if span is not None:
                candidates = len(names or ()) if nodes is None else len(nodes)
                tracing.end(span, *_verdict(reply, label, candidates))

    def _live(self, pod: Obj, request: PodRequest, names: list[str]) -> tuple[Obj, str]:
        log.v(5).info("filter pod %s/%s over %d nodes", request.namespace, request.name, len(names))
        with self.state.lock:
            found = list(map(self.state.nodes.get, names))
            unregistered: list[str] = []
            nodes = cast(list[NodeState], found)
            if None in found:
                unregistered = [n for n, node in zip(names, found, strict=True) if node is None]
                nodes = [node for node in found if node is not None]
            result = filter_pod(
                request, nodes, self.state.usage, self.state.quotas, self.config,
                unregistered=unregistered, ranks=self.ranks,
            )
            if result.node is not None:
                commit(result, self.state.usage, self.state.quotas)
                self.state.assignments[request.uid] = Assignment(result.node, _annotations(result))
            if self.recorder is not None:
                self.recorder.filtered(pod, request.reqs, result.failed, result.node, result.error)
            if klog.v(4):
                self.log_verdicts(request, names, result)
        if result.error is not None:
            self.metrics.allocation_failures.labels(ann.VENDOR_NVIDIA, INVALID_REQUEST).inc()
            self.events.filtering(pod, result.events(len(names)))
            return {"Error": result.error}, "error"
        for reason in result.failed.values():
            for code in failure_codes(reason):
                self.metrics.filter_failures.labels(code).inc()
        if result.node is None:
            self.metrics.pods_unschedulable.inc()
            self.metrics.allocation_failures.labels(ann.VENDOR_NVIDIA, dominant_code(result.failed)).inc()
            self.events.filtering(pod, result.events(len(names)), result.failed)
            return {"NodeNames": None, "FailedNodes": dict(result.failed), "Error": ""}, "unschedulable"
        self.metrics.allocations.labels(ann.VENDOR_NVIDIA).inc()
        self.events.filtering(pod, result.events(len(names)))
        if klog.v(2):
            log.info(
                "pod %s: chose node %s, scores %s",
                request.name,
                result.node,
                ", ".join(f"{n}:{s:.2f}" for n, s in result.fits),
            )
        # As HAMi answers a fit: the chosen node only, no FailedNodes (the events name the others).
        return {"NodeNames": [result.node], "FailedNodes": None, "Error": ""}, "fit"

    def log_verdicts(self, request: PodRequest, names: list[str], result: FilterResult) -> None:
        """-v4 per-node lines in the form operators grep for (called under the state lock)."""
        requested = max((q.memreq for q in request.reqs if q is not None), default=0)
        for node in names:
            log.info(r.FILTERING_NODE.render(node=node, pod=request.name))
            reason = result.failed.get(node)
            if reason is None:
                continue
            detail = ""
            state = self.state.nodes.get(node)
            if state is not None and r.CARD_INSUFFICIENT_MEMORY in reason and requested:
                view = self.state.usage.view(state)
                free = max((view.devs[i].totalmem - view.umem[i] for i in view.nvidia), default=0)
                detail = r.MEMORY_DETAIL.render(requested=requested, free=free)
            log.info(r.filtered_out_line(node, reason, detail))
            if reason not in _NOT_FITTED:  # HAMi's V(4) line where a registered node's devices do not fit
                pod = f"{request.namespace}/{request.name}"
                log.info(r.NODE_UNFIT.render(code=r.NODE_UNFIT_POD, pod=pod, node=node, reason=reason))
