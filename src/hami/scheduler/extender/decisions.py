"""The decision record: the latest verdict of the extender on each pod, with the numbers behind it.

Filter records every pod it is asked about; an unschedulable verdict keeps, per rejected node, the
reason and what the reason compared: the request against the largest free memory and cores on the
node's cards, free split slots, the node lock's holder and age, the namespace's quota left. Bind
adds its outcome. Records live in an LRU bounded by ``--decision-records`` (its size is the gauge
``hami_scheduler_decision_records``) and are served as JSON on the metrics port at
``/debug/decisions`` and ``/debug/decisions/NAMESPACE/NAME``, which ``hami-doctor pod`` reads.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from hami.core import annotations as ann
from hami.core import reasons as r
from hami.core.codec.errors import CodecError
from hami.core.codec.nodelock import parse_node_lock
from hami.core.objects import annotations_of, meta_field
from hami.scheduler.engine.requests import PERCENT_UNSET, ContainerRequest
from hami.scheduler.extender.schedulable import node_reason
from hami.scheduler.extender.state import ClusterState

Record = dict[str, Any]
Environ = dict[str, Any]
StartResponse = Callable[..., Any]

DEFAULT_CAPACITY: Final = 10000
# Rejected nodes described one by one; the rest are counted by reason (a record stays small).
MAX_NODES: Final = 20
PREFIX: Final = "/debug/decisions"

# The phases of a record, and the reasons a pending pod is counted under besides Fit's codes.
UNSCHEDULABLE, FIT, BOUND, BIND_FAILED, ERROR = "unschedulable", "fit", "bound", "bind_failed", "error"
NOT_FILTERED, WAITING_BIND, LOCK_CONTENTION = "NotFiltered", "WaitingForBind", "NodeLockContention"
BOUND_REASON = "Bound"  # the reason of a Pending pod that already has a node
_PLAIN: Final = {r.NODE_UNREGISTERED: "NodeUnregistered", r.NODE_USAGE_UNAVAILABLE: "NodeUsageUnavailable"}


def request_json(reqs: Iterable[ContainerRequest | None], names: list[str]) -> list[dict[str, Any]]:
    """What each container asks for, per card (memory in MiB; a percentage when no MiB was given)."""
    out = []
    for name, req in zip(names, reqs, strict=False):
        if req is None:
            continue
        pct = None if req.mem_percentage == PERCENT_UNSET else req.mem_percentage
        out.append(
            {
                "container": name,
                "gpus": req.nums,
                "memory_mib": req.memreq,
                "memory_percent": pct,
                "cores": min(req.coresreq, 100),
            }
        )
    return out


def dominant_reason(failed: Mapping[str, str]) -> str:
    """The reason code that rejected the most nodes (ties: alphabetical), as the pending gauge's label."""
    counts: Counter[str] = Counter()
    for text in failed.values():
        codes = r.parse_reason(text)
        counts.update(codes or [_PLAIN.get(text, text if text in r.HAMI_CODES else "Other")])
    if not counts:
        return "Other"
    return min(counts, key=lambda code: (-counts[code], code))


def _lock(annotations: Mapping[str, str], now: datetime) -> dict[str, Any] | None:
    value = annotations.get(ann.NODE_LOCK)
    if value is None:
        return None
    try:
        lock = parse_node_lock(value)
    except CodecError:
        return {"value": value, "malformed": True}
    holder = f"{lock.namespace}/{lock.name}" if lock.name else ""
    return {"holder": holder, "age_seconds": round((now - lock.time).total_seconds())}


def _node(state: ClusterState, name: str, reason: str, now: datetime, timeout: timedelta) -> Record:
    """One rejected node: Fit's reason string and the free capacity it was judged against."""
    entry: Record = {"node": name, "reason": reason, "codes": r.parse_reason(reason)}
    node = state.get_node(name)
    annos = annotations_of(node) if node is not None else {}
    entry["schedulable"] = node_reason(
        state.records.get(name), annos, now, timeout, lambda ns, pod: state.get_pod(ns, pod) is not None
    )
    lock = _lock(annos, now)
    if lock is not None:
        entry["lock"] = lock
    registered = state.nodes.get(name)
    if registered is None:
        return entry
    view = state.usage.view(registered)
    cards = [i for i in view.nvidia if view.devs[i].health and not view.devs[i].cordoned]
    free = [
        (view.devs[i].totalmem - view.umem[i], view.devs[i].totalcore - view.ucores[i],
         view.devs[i].count - view.used[i])
        for i in cards
    ]  # fmt: skip
    entry.update(
        cards=len(view.nvidia),
        healthy_cards=len(cards),
        largest_free_memory_mib=max((m for m, _, _ in free), default=0),
        largest_free_cores=max((c for _, c, _ in free), default=0),
        free_slots=sum(max(s, 0) for _, _, s in free),
    )
    return entry


def _quota(state: ClusterState, namespace: str) -> dict[str, int] | None:
    cfg = state.nvidia
    left: dict[str, int] = {}
    for key, name, factor in (
        ("memory_mib_left", cfg.resource_memory_name, cfg.factor),
        ("cores_left", cfg.resource_core_name, 1),
    ):
        entry = state.quotas.entry(namespace, name)
        if entry is not None and entry.limit_set:
            left[key] = entry.limit * factor - entry.used
    return left or None


def unschedulable(
    state: ClusterState, failed: Mapping[str, str], now: datetime, timeout: timedelta, namespace: str
) -> Record:
    """The per-node part of an unschedulable record (call under the state lock)."""
    best_first = sorted(
        failed.items(),
        key=lambda item: (-_free(state, item[0]), item[0]),
    )
    nodes = [_node(state, name, reason, now, timeout) for name, reason in best_first[:MAX_NODES]]
    others: Counter[str] = Counter()
    for _, reason in best_first[MAX_NODES:]:
        others.update(r.parse_reason(reason) or [_PLAIN.get(reason, "Other")])
    out: Record = {"nodes": nodes, "reason": dominant_reason(failed)}
    if others:
        out["other_nodes"] = dict(sorted(others.items()))
    quota = _quota(state, namespace)
    if quota is not None:
        out["quota"] = quota
    return out


def _free(state: ClusterState, name: str) -> int:
    node = state.nodes.get(name)
    if node is None:
        return -1
    view = state.usage.view(node)
    return max((view.devs[i].totalmem - view.umem[i] for i in view.nvidia), default=0)


class DecisionStore:
    """The latest record per pod (namespace/name), least recently updated evicted first."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, on_evict: Callable[[], None] = lambda: None) -> None:
        self.capacity = capacity
        self._on_evict = on_evict
        self._lock = threading.Lock()
        self._records: OrderedDict[str, Record] = OrderedDict()

    def __len__(self) -> int:
        return len(self._records)

    def put(self, namespace: str, name: str, record: Record) -> None:
        key = f"{namespace}/{name}"
        record = {"namespace": namespace, "name": name, "time": time.time(), **record}
        evicted = 0
        with self._lock:
            self._records[key] = record
            self._records.move_to_end(key)
            while len(self._records) > self.capacity:
                self._records.popitem(last=False)
                evicted += 1
        for _ in range(evicted):
            self._on_evict()

    def update(self, namespace: str, name: str, **fields: Any) -> None:
        """Add bind's outcome to the pod's record (a fresh one if it was evicted)."""
        with self._lock:
            found = self._records.get(f"{namespace}/{name}")
            base = dict(found) if found is not None else {}
        base.update(fields)
        base.pop("namespace", None)
        base.pop("name", None)
        base.pop("time", None)
        self.put(namespace, name, base)

    def get(self, namespace: str, name: str) -> Record | None:
        with self._lock:
            found = self._records.get(f"{namespace}/{name}")
            return dict(found) if found is not None else None

    def summary(self) -> list[dict[str, Any]]:
        with self._lock:
            return [
                {k: rec.get(k) for k in ("namespace", "name", "phase", "reason", "node", "time")}
                for rec in self._records.values()
            ]

    def pending_reason(self, pod: Mapping[str, Any]) -> str:
        """Why a Pending pod that requests HAMi resources is still Pending, by its record."""
        if (pod.get("spec") or {}).get("nodeName"):
            return BOUND_REASON
        found = self.get(meta_field(pod, "namespace"), meta_field(pod, "name"))
        if found is None:
            return NOT_FILTERED
        return str(found.get("reason") or WAITING_BIND)


def _json(start_response: StartResponse, status: str, body: Any) -> list[bytes]:
    data = json.dumps(body, indent=2, sort_keys=True).encode() + b"\n"
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


WSGIApp = Callable[[Environ, StartResponse], list[bytes]]


def make_app(store: DecisionStore, node_lock_timeout: timedelta) -> WSGIApp:
    """``/debug/decisions`` (every record, summarised) and ``/debug/decisions/NAMESPACE/NAME``."""

    def app(environ: Environ, start_response: StartResponse) -> list[bytes]:
        path = str(environ.get("PATH_INFO", "")).rstrip("/")
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            return _json(start_response, "405 Method Not Allowed", {"error": "use GET"})
        if path == PREFIX:
            return _json(start_response, "200 OK", {"records": store.summary(), "capacity": store.capacity})
        parts = path[len(PREFIX) + 1 :].split("/") if path.startswith(PREFIX + "/") else []
        if len(parts) != 2 or not all(parts):
            usage = {"error": f"not found; use {PREFIX}/NAMESPACE/NAME"}
            return _json(start_response, "404 Not Found", usage)
        found = store.get(*parts)
        if found is None:
            message = (
                f"no decision for {parts[0]}/{parts[1]}: this replica has not filtered it (another replica "
                "may have, or it was evicted from the record)"
            )
            return _json(start_response, "404 Not Found", {"error": message})
        found["node_lock_timeout_seconds"] = node_lock_timeout.total_seconds()
        return _json(start_response, "200 OK", found)

    return app


class Recorder:
    """What Filter and Bind tell the store; ``filtered`` runs under the state lock (it reads views)."""

    def __init__(
        self,
        store: DecisionStore,
        state: ClusterState,
        lock_timeout: timedelta,
        now: Callable[[], datetime] = lambda: datetime.now().astimezone(),
    ) -> None:
        self.store = store
        self.state = state
        self.lock_timeout = lock_timeout
        self.now = now

    def filtered(
        self, pod: Mapping[str, Any], reqs: Iterable[ContainerRequest | None], failed: Mapping[str, str],
        node: str | None, error: str | None,
    ) -> None:  # fmt: skip
        namespace, name = meta_field(pod, "namespace"), meta_field(pod, "name")
        spec = pod.get("spec") or {}
        names = [str(c.get("name", "")) for key in ("initContainers", "containers")
                 for c in spec.get(key) or [] if isinstance(c, Mapping)]  # fmt: skip
        record: Record = {"uid": meta_field(pod, "uid"), "request": request_json(reqs, names), "node": node}
        if error is not None:
            record.update(phase=ERROR, reason="FilterError", message=error)
        elif node is not None:
            record.update(phase=FIT, reason=WAITING_BIND, rejected=len(failed))
        else:
            verdict = unschedulable(self.state, failed, self.now(), self.lock_timeout, namespace)
            record.update(phase=UNSCHEDULABLE, **verdict)
        self.store.put(namespace, name, record)

    def bound(self, namespace: str, name: str, node: str) -> None:
        self.store.update(namespace, name, phase=BOUND, reason=BOUND_REASON, node=node, message="")

    def bind_failed(self, namespace: str, name: str, node: str, message: str, contention: bool) -> None:
        reason = LOCK_CONTENTION if contention else "BindingFailed"
        fields: Record = {"phase": BIND_FAILED, "reason": reason, "node": node, "message": message}
        if contention:
            found = self.state.get_node(node)
            lock = _lock(annotations_of(found), self.now()) if found is not None else None
            if lock is not None:
                fields["lock"] = lock
        self.store.update(namespace, name, **fields)
