"""The replay's state around the engine: set-up from the snapshot, the usage index, quotas and events."""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import replace

from hami.core.snapshot import model as snap
from hami.scheduler.engine.decision import FilterResult, filter_pod
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.ranking import Ranker
from hami.scheduler.engine.requests import PERCENT_UNSET, PodRequest, pod_request
from hami.scheduler.engine.usage import DeviceShare, PodAllocation, UsageIndex
from hami.tune.simulate import cluster as cl
from hami.tune.simulate.records import SAMPLES, Capacity, PodRun, ReplayResult, arrival_order
from hami.tune.simulate.scenario import Scenario

NO_REQUEST = "asks for no GPU under the snapshot's device config"
# Rankings kept (one per request shape): a history has more shapes than a burst of filter calls.
RANKINGS = 128


def _shape(request: PodRequest | None, namespace: str, limited: bool) -> str:
    if request is None:
        return ""
    return repr((request.reqs, request.n_init, request.options, namespace if limited else ""))


def _median(values: Sequence[int]) -> int:
    return int(statistics.median(values)) if values else 0


class ReplayState:
    """The state one replay works on: the cluster, the usage index and quotas, the waiting pods and
    the event queue, and the operations on them that every part of the replay shares."""

    def __init__(
        self,
        snapshot: snap.Snapshot,
        scenario: Scenario,
        samples: int = SAMPLES,
        order: Sequence[str] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.scenario = scenario
        self.rank = {uid: i for i, uid in enumerate(order)} if order is not None else None
        self.cluster = cl.build(snapshot, scenario)
        self.config = self.cluster.config
        self.usage = UsageIndex()
        self.quotas: QuotaManager = cl.quotas(snapshot, self.config)
        self.ranks = Ranker(size=RANKINGS)
        self.all_nodes: Sequence[NodeState] = self.cluster.nodes
        self.by_name: dict[str, NodeState] = dict(self.cluster.by_name)
        self._active: frozenset[snap.Outage] | None = None  # outages the nodes now reflect
        self.pending: dict[str, PodRun] = {}
        self.events: list[tuple[float, int, int, PodRun]] = []
        self._seq = 0
        self.start, self.end = snapshot.start, snapshot.taken
        self.locks = self._lock_intervals()
        self.capacity = self._capacity()
        runs = [self._run(p) for p in sorted(snapshot.pods, key=arrival_order)]
        self.runs = runs
        self.result = ReplayResult(
            [],
            scenario,
            self.cluster,
            runs,
            [],
            self.capacity,
            self.start,
            self.end,
            self._typical(runs),
            gone_since=snapshot.gone_since,
        )
        self._sample_times = self._grid(samples)
        self._last_t = self.start
        self._mem = self._cores = 0
        self._peaks = any(p.peak_memory_bytes for p in snapshot.pods)
        self._undo: list[tuple[str, PodAllocation | None]] = []  # trial changes to the usage index
        self._idle: dict[str, tuple[int, int, int, int]] = {}  # _card_figures of nodes without usage

    def _outages_at(self, t: float) -> None:
        """The nodes as the scheduler saw them at ``t``: a card with outages in the history is
        unhealthy exactly within them, a node is left out within its own; the rest as registered."""
        outages = self.snapshot.outages
        active = frozenset(o for o in outages if o.since <= t and (o.until is None or t < o.until))
        if not outages or active == self._active:
            return
        self._active = active
        judged = {(o.node, o.device) for o in outages if o.device}
        down = {(o.node, o.device) for o in active if o.device}
        gone = {o.node for o in active if not o.device}
        nodes = [
            replace(
                n,
                devices=tuple(
                    replace(d, health=(n.name, d.id) not in down) if (n.name, d.id) in judged else d
                    for d in n.devices
                ),
            )
            for n in self.cluster.nodes
            if n.name not in gone
        ]
        self.all_nodes = tuple(nodes)
        self.by_name = {n.name: n for n in nodes}
        self.ranks = Ranker(size=RANKINGS)  # its verdicts were for the nodes as they were

    # --- set-up ---------------------------------------------------------------------------------

    def _run(self, pod: snap.Pod) -> PodRun:
        fixed = pod.allocation is not None and pod.scheduled is None
        request = pod_request(pod.as_object(), self.config.nvidia)
        return PodRun(pod, request, _shape(request, pod.namespace, self.quotas.limited(pod.namespace)), fixed)

    def _lock_intervals(self) -> dict[str, list[tuple[float, float, str]]]:
        """Per node, (since, until, owner) of the locks that refuse binds; the owner's own bind is
        not refused by the lock it took."""
        expire, current = self.cluster.lock_expire, self.snapshot.scheduler.node_lock_expire
        out: dict[str, list[tuple[float, float, str]]] = {}
        for lock in self.snapshot.locks:
            until = lock.since + expire
            # A lock that lasted its full expiry was broken by expiry: under another expiry it lasts that.
            if lock.released is not None and lock.released - lock.since < current:
                until = min(until, lock.released)
            out.setdefault(lock.node, []).append((lock.since, until, lock.owner))
        return out

    def _capacity(self) -> Capacity:
        c = Capacity()
        for node in self.cluster.nodes:
            for d in node.devices:
                c.cards += 1
                c.mem_mib += d.devmem
                c.physical_mib += self.cluster.physical_mib.get(d.id, d.devmem)
                c.cores += d.devcore
                c.slots += d.count
        return c

    def _typical(self, runs: Iterable[PodRun]) -> tuple[int, int]:
        cards = [d.devmem for n in self.cluster.nodes for d in n.devices]
        card = _median(cards)
        mems: list[int] = []
        cores: list[int] = []
        for run in runs:
            for req in run.request.reqs if run.request is not None else ():
                if req is not None:
                    pct = req.mem_percentage
                    mems.append(req.memreq if pct == PERCENT_UNSET else card * pct // 100)
                    cores.append(req.coresreq)
        return _median(mems), _median(cores)

    def _grid(self, n: int) -> list[float]:
        if self.end <= self.start or n < 2:
            return [self.end]
        step = (self.end - self.start) / (n - 1)
        return [self.start + i * step for i in range(n)]

    def _push(self, t: float, kind: int, run: PodRun) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, kind, self._seq, run))

    def _advance(self, t: float) -> None:
        dt = t - self._last_t
        if dt > 0:
            self.result.mem_area += self._mem * dt
            self.result.core_area += self._cores * dt
            self._last_t = t

    def _account(self, shares: Iterable[DeviceShare], sign: int) -> None:
        for s in shares:
            self._mem += sign * s.usedmem
            self._cores += sign * s.usedcores

    def _hold(self, alloc: PodAllocation) -> None:
        self.usage.add(alloc)
        self.quotas.add_usage(alloc.namespace, alloc.shares)
        self._account(alloc.shares, 1)

    def _release(self, uid: str) -> PodAllocation | None:
        old = self.usage.remove(uid)
        if old is not None:
            self.quotas.remove_usage(old.namespace, old.shares)
            self._account(old.shares, -1)
        return old

    def _locked(self, node: str, t: float, pod: str) -> bool:
        """Whether a lock refuses ``pod``'s bind to ``node`` at ``t``."""
        return any(a <= t < b and owner != pod for a, b, owner in self.locks.get(node, ()))

    def _filter(self, run: PodRun, nodes: Sequence[NodeState]) -> FilterResult:
        if run.request is None:
            return FilterResult(error=NO_REQUEST)
        ranks = self.ranks if nodes is self.all_nodes else None
        return filter_pod(run.request, nodes, self.usage, self.quotas, self.config, ranks=ranks)
