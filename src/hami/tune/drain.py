"""Drain plan from a scheduling snapshot (``hami-tune defrag --snapshot``), decided by the scheduler's
own engine.

Pure: a snapshot in (``hami-doctor snapshot``: the nodes' registered cards, the pods with their
requests, annotations and allocations), an ordered plan out. Where a pending pod may go is what the
engine's filter says: its ``nvidia.com/use-gputype`` / ``nouse-gputype``, ``use-gpuuuid`` /
``nouse-gpuuuid``, ``numa-bind``, cores and memory, the node and GPU policies, and quotas. A pending
pod that fits nowhere now is tried on each node with the fewest of its pods moved away (then the least
memory): a step is planned only when the pod then fits there and every pod moved fits, through the same
filter, on the other nodes kept. Moving the pods (deleting them so their controllers recreate them, or
cordoning first) is the operator's step.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from hami.core.snapshot import model as snap
from hami.scheduler.engine.decision import FilterConfig, FilterResult, commit, filter_pod
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.requests import PodRequest, pod_request
from hami.scheduler.engine.usage import PodAllocation, UsageIndex
from hami.tune.simulate import cluster as cl
from hami.tune.simulate.scenario import Scenario


@dataclass
class Drain:
    node: str
    moves: list[tuple[str, str]]  # (namespace/pod, the node it fits on)
    serves: list[str]  # pending pods (namespace/pod) that then fit on this node


@dataclass
class DrainPlan:
    pending: list[str]
    fit_now: list[tuple[str, str]] = field(default_factory=list)  # (pod, node)
    steps: list[Drain] = field(default_factory=list)
    unserved: list[tuple[str, str]] = field(default_factory=list)  # (pod, why, in the engine's words)


# Sets of pods tried per node and size; beyond it the whole node is the one set tried.
MAX_SUBSETS = 500


def _memory(allocs: Sequence[PodAllocation]) -> int:
    return sum(s.usedmem for a in allocs for s in a.shares)


def _index(allocs: Iterable[PodAllocation]) -> UsageIndex:
    usage = UsageIndex()
    for a in allocs:
        usage.add(a)
    return usage


def _why(result: FilterResult) -> str:
    if result.error is not None:
        return result.error
    reasons = Counter(result.failed.values())
    return "; ".join(f"{n} node(s): {reason}" for reason, n in reasons.most_common()) or "no node"


class _Planner:
    def __init__(self, snapshot: snap.Snapshot) -> None:
        cluster = cl.build(snapshot, Scenario())
        self.nodes: Sequence[NodeState] = cluster.nodes
        self.config: FilterConfig = cluster.config
        self.quotas: QuotaManager = cl.quotas(snapshot, self.config)
        self.requests: dict[str, PodRequest | None] = {}
        self.keys: dict[str, str] = {}
        placed: list[PodAllocation] = []
        self.pending: list[str] = []
        for pod in snapshot.pods:
            if pod.finished is not None:
                continue
            self.keys[pod.uid] = pod.key
            self.requests[pod.uid] = pod_request(pod.as_object(), self.config.nvidia)
            alloc = cl.reservation(pod)
            if alloc is not None:
                placed.append(alloc)
                self.quotas.add_usage(alloc.namespace, alloc.shares)
            elif pod.allocation is None and self.requests[pod.uid] is not None:
                self.pending.append(pod.uid)
        self.usage = _index(placed)

    def filter(
        self, uid: str, nodes: Sequence[NodeState], usage: UsageIndex, quotas: QuotaManager | None
    ) -> FilterResult:
        request = self.requests[uid]
        assert request is not None
        return filter_pod(request, nodes, usage, quotas, self.config)

    def _try(
        self, node: NodeState, movers: Sequence[PodAllocation], left: list[str], kept: Sequence[NodeState]
    ) -> tuple[Drain, UsageIndex] | None:
        """Move ``movers`` off ``node``: the step and the usage after it, if some of ``left`` then fit."""
        gone = {a.uid for a in movers}
        trial = _index(a for a in self.usage.pods() if a.uid not in gone)
        serves: list[str] = []
        for uid in left:
            result = self.filter(uid, [node], trial, self.quotas)
            if result.node is not None:
                commit(result, trial, None)
                serves.append(uid)
        if not serves:
            return None
        moves: list[tuple[str, str]] = []
        for a in movers:
            # Quotas are per namespace and a move leaves the namespace's usage as it was: not rechecked.
            if self.requests.get(a.uid) is None:
                return None  # not a pod the scheduler could place again
            result = self.filter(a.uid, kept, trial, None)
            if result.node is None:
                return None
            commit(result, trial, None)
            moves.append((self.keys.get(a.uid, a.uid), result.node))
        return Drain(node.name, moves, [self.keys[u] for u in serves]), trial

    def drain(self, node: NodeState, left: list[str], drained: set[str]) -> tuple[Drain, UsageIndex] | None:
        """The fewest moves off ``node`` (then the least memory) that let some of ``left`` run there."""
        on_node = sorted((a for a in self.usage.pods() if a.node == node.name), key=lambda a: a.uid)
        kept = [n for n in self.nodes if n.name != node.name and n.name not in drained]
        for k in range(1, len(on_node) + 1):
            if math.comb(len(on_node), k) > MAX_SUBSETS:
                return self._try(node, on_node, left, kept)  # too many choices: the whole node
            for movers in sorted(combinations(on_node, k), key=_memory):
                found = self._try(node, movers, left, kept)
                if found is not None:
                    return found
        return None

    def plan(self) -> DrainPlan:
        out = DrainPlan([self.keys[u] for u in self.pending])
        left: list[str] = []
        why: dict[str, str] = {}
        for uid in self.pending:
            result = self.filter(uid, self.nodes, self.usage, self.quotas)
            if result.node is not None:
                commit(result, self.usage, self.quotas)
                out.fit_now.append((self.keys[uid], result.node))
            else:
                left.append(uid)
                why[uid] = _why(result)
        drained: set[str] = set()
        while left:
            found = [
                d for d in (self.drain(n, left, drained) for n in self.nodes if n.name not in drained) if d
            ]
            if not found:
                break
            step, self.usage = min(found, key=lambda d: (len(d[0].moves), -len(d[0].serves), d[0].node))
            drained.add(step.node)
            out.steps.append(step)
            left = [u for u in left if self.keys[u] not in step.serves]
        out.unserved = [(self.keys[u], why[u]) for u in left]
        return out


def plan(snapshot: snap.Snapshot) -> DrainPlan:
    return _Planner(snapshot).plan()


def to_text(p: DrainPlan) -> str:
    lines = [f"pending GPU pods: {', '.join(p.pending) if p.pending else 'none'}"]
    lines += [f"fits now: {pod} on {node}" for pod, node in p.fit_now]
    for i, step in enumerate(p.steps, 1):
        moves = ", ".join(f"{pod} -> {node}" for pod, node in step.moves) or "no pod"
        lines.append(f"{i}. on {step.node}, move {len(step.moves)} pod(s) ({moves}); then "
                     f"{', '.join(step.serves)} fit(s) there")  # fmt: skip
    for pod, why in p.unserved:
        lines.append(f"no drain lets {pod} run: {why}")
    if not p.steps and not p.unserved:
        lines.append("nothing to drain: every pending pod fits now")
    return "\n".join(lines) + "\n"
