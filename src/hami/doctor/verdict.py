"""The scheduler's decision record of one pod, as findings whose summaries carry the numbers.

The record is what ``/debug/decisions/NAMESPACE/NAME`` on the scheduler's metrics port answers: the
phase (unschedulable, fit, bound, bind_failed, error), the request per container, and for each
rejected node Fit's reason with the free capacity it was compared against. The summaries say both
sides of the comparison ("requests 160 GiB per card; the largest free on any node is 40 GiB").
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hami.core import readable, reasons
from hami.core.duration import format_duration
from hami.doctor.findings import BROKEN, OK, WARNING, Finding

Obj = dict[str, Any]

# What the scheduler's node verdict means for a pod, and what to do (hami_scheduler_node_schedulable).
UNSCHEDULABLE_FIX = {
    "handshake_expired": "the node's device plugin stopped answering and kubelet reports no GPU: check the "
    "device plugin pod on it (hami-doctor node NAME)",
    "decode_error": "the node's hami.io/node-nvidia-register cannot be decoded: upgrade the device plugin "
    "and scheduler together",
    "no_devices": "the node registers no GPU: is the device plugin running there? (hami-doctor node NAME)",
    "unhealthy": "every GPU of the node is unhealthy or cordoned: nvidia-smi -q -d HEALTH on the node",
    "node_lock": "a node lock holds the node (hami-doctor node NAME shows the holder)",
}


def _request(rec: Obj) -> Obj:
    """The most demanding container request (what no card could hold)."""
    reqs = rec.get("request") or [{}]
    return max(reqs, key=lambda q: (q.get("memory_mib") or 0, q.get("cores") or 0, q.get("gpus") or 0))


def _nodes_with(rec: Obj, code: str) -> list[Obj]:
    return [n for n in rec.get("nodes") or [] if code in (n.get("codes") or {}) or n.get("reason") == code]


def _best(nodes: list[Obj], key: str) -> tuple[float, str]:
    found = [(float(n.get(key) or 0), str(n.get("node"))) for n in nodes if key in n]
    return max(found, default=(0.0, ""))


def _memory(rec: Obj, nodes: list[Obj]) -> str:
    req = _request(rec)
    free, where = _best(nodes, "largest_free_memory_mib")
    pct = req.get("memory_percent")
    asked = f"{readable.percent(pct)} of a card" if pct else readable.mib(req.get("memory_mib", 0))
    return (
        f"requests {asked} per card; the largest free on any node is {readable.mib(free)} "
        f"({where or 'none'})"
    )


def _cores(rec: Obj, nodes: list[Obj]) -> str:
    free, where = _best(nodes, "largest_free_cores")
    return (
        f"requests {readable.percent(_request(rec).get('cores', 0))} of a card's cores; the most free on "
        f"any node is {readable.percent(free)} ({where or 'none'})"
    )


def _devices(rec: Obj, nodes: list[Obj]) -> str:
    cards, where = _best(nodes, "cards")
    gpus = _request(rec).get("gpus", 0)
    return (
        f"requests {readable.number(gpus)} GPUs in one container; the most on any node is "
        f"{readable.number(cards)} ({where})"
    )


def _slots(_rec: Obj, nodes: list[Obj]) -> str:
    free, where = _best(nodes, "free_slots")
    return (
        f"every split slot is taken: the most free slots on any node is {readable.number(free)} "
        f"({where or 'none'})"
    )


def _quota(rec: Obj, _nodes: list[Obj]) -> str:
    left = rec.get("quota") or {}
    req = _request(rec)
    parts = []
    if "memory_mib_left" in left:
        asked = readable.mib(req.get("memory_mib", 0))
        parts.append(f"{readable.mib(left['memory_mib_left'])} memory left (requests {asked})")
    if "cores_left" in left:
        cores = f"{readable.number(left['cores_left'])} cores left"
        parts.append(f"{cores} (requests {readable.number(req.get('cores', 0))})")
    return f"namespace quota: {', '.join(parts) or 'no HAMi limit found'}"


def _on(_rec: Obj, nodes: list[Obj]) -> str:
    return "on " + ", ".join(str(n.get("node")) for n in nodes)


NUMBERS: dict[str, Callable[[Obj, list[Obj]], str]] = {
    reasons.CARD_INSUFFICIENT_MEMORY: _memory,
    reasons.CARD_INSUFFICIENT_CORE: _cores,
    reasons.NODE_INSUFFICIENT_DEVICE: _devices,
    reasons.CARD_TIME_SLICING_EXHAUSTED: _slots,
    reasons.RESOURCE_QUOTA_NOT_FIT: _quota,
}


def _evidence(node: Obj, lock_timeout: timedelta) -> str:
    line = f"{node.get('node')}: {node.get('reason')}"
    if "largest_free_memory_mib" in node:
        cards = f"{node.get('healthy_cards', 0)}/{node.get('cards', 0)}"
        line += (
            f"; largest free {readable.mib(node['largest_free_memory_mib'])}, "
            f"{readable.percent(node.get('largest_free_cores', 0))} cores, "
            f"{readable.number(node.get('free_slots', 0))} free slots on {cards} healthy cards"
        )
    if node.get("schedulable", "ok") != "ok":
        line += f"; scheduler: {node['schedulable']}"
    lock = node.get("lock")
    if lock:
        held = timedelta(seconds=round(float(lock.get("age_seconds") or 0)))
        holder = lock.get("holder") or "?"
        if held >= lock_timeout:  # the scheduler takes it over: it holds nothing
            line += (
                f"; an expired lock of {holder} ({format_duration(held)} old, timeout "
                f"{format_duration(lock_timeout)})"
            )
        else:
            line += f"; lock held by {holder} for {format_duration(held)}"
    return line


def _timeout(rec: Obj) -> timedelta:
    return timedelta(seconds=float(rec.get("node_lock_timeout_seconds") or 300))


def _more(rec: Obj, code: str | None) -> tuple[str, ...]:
    """The record's count of further nodes (not listed one by one) with ``code``, or with any."""
    other = rec.get("other_nodes") or {}
    return tuple(
        f"{readable.number(n)} more nodes: {c}" for c, n in sorted(other.items()) if code in (None, c)
    )


def unschedulable(rec: Obj) -> list[Finding]:
    """One finding per reason, each with the evidence of its own nodes only."""
    nodes, timeout = rec.get("nodes") or [], _timeout(rec)
    codes: dict[str, int] = {}
    for n in nodes:
        for code in n.get("codes") or {}:
            codes[code] = codes.get(code, 0) + 1
    out = []
    for code in sorted(codes, key=lambda c: (-codes[c], c)):
        with_code = _nodes_with(rec, code)
        meaning, fix = reasons.explain(code)
        numbers = NUMBERS.get(code, _on)
        summary = f"{code}: {numbers(rec, with_code)} ({meaning})"
        evidence = (*(_evidence(n, timeout) for n in with_code), *_more(rec, code))
        out.append(Finding(BROKEN, f"pod.decision.{code}", summary, evidence, fix))
    dropped = [n for n in nodes if not n.get("codes")]
    for n in dropped:
        why = str(n.get("schedulable") or "no_devices")
        out.append(
            Finding(
                BROKEN,
                f"pod.decision.node-{why}",
                f"{n.get('node')}: the scheduler places no GPU pod there ({why}; {n.get('reason')})",
                (_evidence(n, timeout),),
                UNSCHEDULABLE_FIX.get(why, "hami-doctor node " + str(n.get("node"))),
            )
        )
    if not out:
        out.append(
            Finding(
                BROKEN, "pod.decision.unschedulable", "no node fits the pod",
                (*(_evidence(n, timeout) for n in nodes), *_more(rec, None)), "read the record",
            )
        )
    return out


def findings(rec: Obj, source: str) -> list[Finding]:
    """The diagnosis a decision record gives for a pod that is not bound yet."""
    phase = rec.get("phase")
    seen = Finding(
        OK, "scheduler.decision", f"the scheduler's decision record ({source})", (f"phase: {phase}",)
    )
    if phase == "unschedulable":
        return [seen, *unschedulable(rec)]
    node = rec.get("node") or "?"
    if phase == "fit":
        return [
            seen,
            Finding(
                WARNING,
                "pod.decision.fit",
                f"the scheduler chose {node} and is waiting for kube-scheduler to bind the pod",
                (f"{rec.get('rejected', 0)} other nodes rejected",),
                "check kube-scheduler: another plugin may hold the pod (its log for this pod)",
            ),
        ]
    if phase == "bind_failed":
        lock = rec.get("lock") or {}
        timeout = _timeout(rec)
        detail = ""
        if lock:
            age = timedelta(seconds=float(lock.get("age_seconds") or 0))
            detail = (
                f": node lock held by {lock.get('holder') or '?'} for {format_duration(age)}, taken over "
                f"after {format_duration(timeout)}"
            )
        return [
            seen,
            Finding(
                BROKEN,
                f"pod.decision.{rec.get('reason', 'BindingFailed')}",
                f"bind to {node} failed{detail}",
                (str(rec.get("message", "")),),
                "wait for the holder's allocation; hami-doctor node " + node + " shows the lock",
            ),
        ]
    if phase == "error":
        return [seen, Finding(BROKEN, "pod.decision.error", f"filter error: {rec.get('message')}", (), "")]
    return [seen, Finding(OK, "pod.decision.bound", f"the scheduler bound the pod to {node}")]
