"""Defragmentation plan: which nodes to drain, in which order, so that pending requests find a card.

Pure: cards, the pods on them and the pending request sizes in, an ordered plan out. A pending request
that fits no card's free slice now (first fit, largest first) needs freed cards. Nodes are taken
cheapest first (fewest pods to move, then most memory freed); a node is drained only when its pods fit
on the cards of the nodes kept (first fit, largest first), and the plan stops as soon as every pending
request has a card. Memory decides fit, with one free split slot per placement; cores and the pods'
filters are not in these series: ``hami.tune.drain`` plans from a snapshot with them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from hami.core.promapi import QueryFn

GIB = 1024**3
MIB = 1024**2


@dataclass
class Card:
    node: str
    uuid: str
    model: str
    capacity: float  # schedulable bytes
    reserved: float
    slots: int  # free split slots
    split: int  # split slots in all

    @property
    def free(self) -> float:
        return self.capacity - self.reserved


@dataclass(frozen=True)
class Tenant:
    namespace: str
    pod: str
    node: str
    uuid: str
    reserved: float


@dataclass
class Step:
    node: str
    pods: list[str]  # namespace/pod, to move elsewhere
    cards_freed: int
    bytes_freed: float
    serves: list[float] = field(default_factory=list)  # pending request sizes placed on its cards


@dataclass
class Plan:
    pending: list[float]
    fit_now: list[float]
    steps: list[Step]
    unserved: list[float]  # requests no plan within these nodes can place


def _place(size: float, cards: Iterable[Card]) -> Card | None:
    for c in cards:
        if c.slots >= 1 and c.free >= size:
            c.reserved += size
            c.slots -= 1
            return c
    return None


def plan(cards: list[Card], tenants: list[Tenant], pending: list[float]) -> Plan:
    work = {
        (c.node, c.uuid): Card(c.node, c.uuid, c.model, c.capacity, c.reserved, c.slots, c.split)
        for c in cards
    }
    fit_now: list[float] = []
    left: list[float] = []
    hosting: set[str] = set()  # nodes a pending request was placed on: not drained under it
    for size in sorted(pending, reverse=True):
        placed = _place(size, sorted(work.values(), key=lambda c: c.free))
        (fit_now if placed else left).append(size)
        if placed:
            hosting.add(placed.node)
    by_node: dict[str, list[Tenant]] = {}
    for t in tenants:
        if (t.node, t.uuid) in work:
            by_node.setdefault(t.node, []).append(t)
    nodes = sorted(
        {c.node for c in work.values()},
        key=lambda n: (
            len({(t.namespace, t.pod) for t in by_node.get(n, [])}),
            -sum(c.capacity for c in work.values() if c.node == n),
            n,
        ),
    )
    steps: list[Step] = []
    drained: set[str] = set()
    for node in nodes:
        if not left:
            break
        if node in hosting:
            continue
        keep = [c for c in work.values() if c.node != node and c.node not in drained]
        trial = {
            (c.node, c.uuid): Card(c.node, c.uuid, c.model, c.capacity, c.reserved, c.slots, c.split)
            for c in keep
        }
        movers = sorted(by_node.get(node, []), key=lambda t: -t.reserved)
        if any(_place(t.reserved, sorted(trial.values(), key=lambda c: c.free)) is None for t in movers):
            continue  # its pods have nowhere to go
        freed = [
            Card(c.node, c.uuid, c.model, c.capacity, 0.0, c.split, c.split)
            for c in work.values()
            if c.node == node
        ]
        serves = [size for size in left if _place(size, freed)]
        if not serves:
            continue  # whole cards here would not take a pending request: not worth the moves
        for key, card in trial.items():
            work[key] = card
        for c in freed:
            work[c.node, c.uuid] = c
        for size in serves:
            left.remove(size)
        drained.add(node)
        steps.append(
            Step(
                node,
                sorted({f"{t.namespace}/{t.pod}" for t in movers}),
                len(freed),
                sum(t.reserved for t in movers),
                serves,
            )
        )
    return Plan(sorted(pending, reverse=True), fit_now, steps, left)


def collect(
    query: QueryFn, scheduler_job: str, ksm_selector: str
) -> tuple[list[Card], list[Tenant], list[float]]:
    """Cards and their pods from the scheduler's series; pending requests from kube-state-metrics (each
    pending container asks for `nvidia.com/gpu` cards of `nvidia.com/gpumem` MiB each)."""
    sch = f'job="{scheduler_job}"'
    card = "node, device_uuid"

    def by_card(expr: str) -> dict[tuple[str, str], float]:
        return {(s.labels.get("node", ""), s.labels.get("device_uuid", "")): s.value for s in query(expr)}

    reserved = by_card(f"max by ({card}) (hami_gpu_memory_allocated_bytes{{{sch}}})")
    split = by_card(f"max by ({card}) (hami_gpu_split_limit{{{sch}}})")
    shared = by_card(f"max by ({card}) (hami_gpu_shared_count{{{sch}}})")
    cards = []
    for s in query(f"max by ({card}, device_type) (hami_gpu_memory_limit_bytes{{{sch}}})"):
        key = (s.labels.get("node", ""), s.labels.get("device_uuid", ""))
        total = int(split.get(key, 0))
        cards.append(
            Card(
                *key,
                s.labels.get("device_type", ""),
                s.value,
                reserved.get(key, 0.0),
                total - int(shared.get(key, 0)),
                total,
            )
        )
    tenants = [
        Tenant(
            s.labels.get("namespace", ""), s.labels.get("pod", ""), s.labels.get("node", ""),
            s.labels.get("device_uuid", ""), s.value,
        )
        for s in query(
            f"sum by (namespace, pod, {card}) (max by (namespace, pod, container_index, {card}) "
            f"(hami_vgpu_memory_allocated_bytes{{{sch}}}))"
        )
    ]  # fmt: skip
    phase = f'kube_pod_status_phase{{{ksm_selector}, phase="Pending"}}'
    pending_pods = f"and on (namespace, pod) (max by (namespace, pod) ({phase}) == 1)"

    def requests(resource: str) -> dict[tuple[str, str, str], float]:
        series = f'kube_pod_container_resource_requests{{{ksm_selector}, resource="{resource}"}}'
        return {
            (s.labels.get("namespace", ""), s.labels.get("pod", ""), s.labels.get("container", "")): s.value
            for s in query(f"max by (namespace, pod, container) ({series})\n{pending_pods}")
        }

    gpus, mem = requests("nvidia_com_gpu"), requests("nvidia_com_gpumem")
    pending = [mem[k] * MIB for k, n in sorted(gpus.items()) if k in mem for _ in range(int(n))]
    return cards, tenants, pending


def to_text(p: Plan) -> str:
    gib = [f"{s / GIB:.1f} GiB" for s in p.pending]
    lines = [f"pending requests: {', '.join(gib) if gib else 'none'}"]
    if p.fit_now:
        lines.append(f"fit a free slice now: {', '.join(f'{s / GIB:.1f} GiB' for s in p.fit_now)}")
    for i, step in enumerate(p.steps, 1):
        lines.append(
            f"{i}. drain {step.node}: move {len(step.pods)} pod(s) ({', '.join(step.pods) or 'none'}), "
            f"{step.bytes_freed / GIB:.1f} GiB; frees {step.cards_freed} card(s) for "
            f"{', '.join(f'{s / GIB:.1f} GiB' for s in step.serves)}"
        )
    if p.unserved:
        lines.append(
            "no drain order places: "
            + ", ".join(f"{s / GIB:.1f} GiB" for s in p.unserved)
            + " (larger than any card, or the other nodes cannot take the moved pods)"
        )
    if not p.steps and not p.unserved:
        lines.append("nothing to drain: every pending request fits a free slice now")
    if p.pending:
        # Prometheus has sizes, not the pods' filters: say so rather than claim a fit the filter refuses.
        lines.append(
            "memory and split slots only: the pods' GPU type and UUID filters, numa-bind and cores are "
            "not in Prometheus; hami-tune defrag --snapshot (hami-doctor snapshot) plans with them"
        )
    return "\n".join(lines) + "\n"
