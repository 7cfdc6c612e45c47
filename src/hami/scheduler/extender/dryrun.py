"""The dry-run Filter (§4.1 step 2, §9.3): ExtenderArgs that carry ``Nodes``.

A caller configured with ``nodeCacheCapable: false`` (Cluster Autoscaler asking "would this pod
fit on a node like this template?") sends whole Node objects. Each one is decoded from its own
annotations with the register path's decoders, its usage starts at zero, and the pod is scored
exactly as the live filter does. Nothing is written: no event, no pod patch, no reservation, no
quota usage; the namespace's quota is read as it stands. The answer names the single best node
(a copy of the object the caller sent) in ``Nodes``, with ``FailedNodes`` for the others; a node
whose annotations yield no device, or fail to decode, is ``node unregistered``.

Section signs (§) refer to docs/design/scheduler.md.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from typing import Any

from hami.core import annotations as ann
from hami.core import klog
from hami.core.codec.cordon import parse_cordon
from hami.core.codec.errors import CodecError
from hami.core.codec.node_devices import get_node_devices
from hami.scheduler.engine.decision import FilterConfig, filter_pod
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.requests import pod_requests
from hami.scheduler.engine.usage import UsageIndex
from hami.scheduler.extender.filter_service import NOT_SYNCED, FilterService
from hami.scheduler.extender.metrics import SIMULATED
from hami.scheduler.extender.state import annotations_of, meta_field

log = klog.get_logger(__name__)

Obj = dict[str, Any]


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


def transient_node(node: Mapping[str, Any]) -> NodeState | str:
    """The node as the filter sees it, from its annotations alone; the reason it is unusable otherwise."""
    annos = {k: v for k, v in annotations_of(node).items() if isinstance(v, str)}
    try:
        devices = get_node_devices(annos, annos.get(ann.NODE_PAIR_SCORE))
    except CodecError as err:
        return str(err)
    try:
        cordoned = parse_cordon(annos.get(ann.NODE_DEVICE_CORDON))
    except CodecError:
        cordoned = frozenset()  # as the register pass: a bad cordon list cordons nothing
    return NodeState(meta_field(node, "name"), tuple(devices), cordoned)


def _result(
    nodes: Obj | None = None,
    names: Sequence[str] | None = None,
    failed: Mapping[str, str] | None = None,
    error: str = "",
) -> Obj:
    """An ExtenderFilterResult with every Go field, as HAMi marshals it."""
    return {
        "Nodes": nodes,
        "NodeNames": None if names is None else list(names),
        "FailedNodes": None if failed is None else dict(failed),
        "FailedAndUnresolvableNodes": None,
        "Error": error,
    }


def passthrough(names: Sequence[str] | None, nodes: Sequence[Mapping[str, Any]]) -> Obj:
    """§4.1 step 1: ``NodeNames`` echoed as HAMi does, and (deliberately unlike HAMi, which
    answers ``Nodes`` null) the ``Nodes`` sent: a ``nodeCacheCapable: false`` caller reads only
    ``Nodes``, and would otherwise take a pod without HAMi resources to fit nowhere."""
    return _result({"metadata": {}, "items": [dict(n) for n in nodes]}, names=names)


def simulate_filter(
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    names: Sequence[str] | None,
    quotas: QuotaManager | None,
    config: FilterConfig,
) -> tuple[Obj, str]:
    """(ExtenderFilterResult, outcome) for a dry run of ``pod`` over the supplied ``nodes``.

    The outcome is ``fit``, ``unschedulable``, ``passthrough`` or ``error``. Reads ``quotas``,
    mutates nothing.
    """
    states: list[NodeState] = []
    objects: dict[str, Mapping[str, Any]] = {}
    unregistered: list[str] = []
    for node in nodes:
        name = meta_field(node, "name")
        state = transient_node(node)
        if isinstance(state, str):
            log.v(4).info("dry-run filter: node %s unregistered: %s", name, state)
            unregistered.append(name)
            continue
        states.append(state)
        objects.setdefault(name, node)
    result = filter_pod(pod, states, UsageIndex(), quotas, config, unregistered=unregistered)
    if not result.requested:
        return passthrough(names, nodes), "passthrough"
    if result.error is not None:
        return _result(error=result.error), "error"
    if result.node is None:
        return _result(failed=result.failed), "unschedulable"
    best = copy.deepcopy(dict(objects[result.node]))
    return _result({"metadata": {}, "items": [best]}, failed=result.failed), "fit"


def serve(
    service: FilterService, pod: Obj, nodes: Sequence[Mapping[str, Any]], names: Sequence[str] | None
) -> Obj:
    """The dry run behind POST /filter: short-circuit, cache-sync wait, quota read under the state
    lock; timed in the filter latency histogram under ``simulated_<outcome>``."""
    started = time.monotonic()
    outcome = "error"
    try:
        reqs, _ = pod_requests(pod, service.config.nvidia)
        if not any(req is not None for req in reqs):
            outcome = "passthrough"
            return passthrough(names, nodes)
        if not service.state.synced.wait(service.sync_wait):
            return _result(error=NOT_SYNCED)
        with service.state.lock:
            reply, outcome = simulate_filter(pod, nodes, names, service.state.quotas, service.config)
        if klog.v(2):
            chosen = [meta_field(n, "name") for n in (reply.get("Nodes") or {}).get("items", [])]
            log.info(
                "dry-run filter pod %s/%s over %d nodes: %s, chose %s",
                meta_field(pod, "namespace"), meta_field(pod, "name"), len(nodes), outcome, chosen,
            )
        return reply
    finally:
        service.metrics.filter_duration.labels(SIMULATED + outcome).observe(time.monotonic() - started)
