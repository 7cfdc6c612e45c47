"""The replay: a snapshot's pods through the scheduling engine, in arrival order, with departures.

Every decision is the extender's own: ``filter_pod`` over the registered nodes with the usage index
and quota manager, then ``commit``. Around it the replay plays kube-scheduler and the cluster:

- A pod is filtered when it arrives (its creation time). The API keeps times to the second, so
  the order of what happened within one second (arrivals, departures, the retries they caused)
  is lost. Under the snapshot's own configuration the replay searches, for each second, for the
  order under which the most pods get the outcome the snapshot recorded (depth-first, a bounded
  number of filter calls), and retries waiting pods created in the same second in the order
  under which the most of them get their recorded outcome (every order of up to four, else
  greedily); every other scenario replays the order found. Without this, one swapped pair changes
  the cards of every later pod on a busy node.
- When no node fits a pod it waits; kube-scheduler retries waiting pods when capacity frees up, so
  every departure retries them in arrival order. A retry after a departure from node N filters
  over N alone: no other node gained capacity since the pod's last attempt, so N is the only node
  the full filter could newly choose (a departure that frees namespace quota retries over all
  nodes). Pods of one request shape that N refused in this round are not tried again on it.
- A pod placed by the scheduler in the snapshot runs as long as it ran there, from whenever the
  replay places it (placed within a second of its recorded placement, it leaves when it left
  there); one still running then stays. A pod placed outside the scheduler (no
  ``scheduled`` time) keeps its recorded devices from creation to finish, under every scenario: a
  configuration change does not move running pods. A pod deleted while waiting leaves the queue.
- Node locks: a successful bind's lock is taken as released at once (the device plugin's
  Allocate follows within seconds). A lock the snapshot shows held longer (a crashed or stuck
  bind) refuses binds to its node until it is released or expires under the scenario's
  ``nodeLockExpire``. HAMi's filter does not look at locks, so it keeps choosing that node; the
  bind fails, the reservation stays and kube-scheduler retries the pod with its back-off (1 s,
  doubling, at most 10 s).

Samples of the cluster state at regular times feed the report's time series and fragmentation.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby, permutations

from hami.core.devices import MODE_MIG, PodDevices
from hami.core.snapshot import model as snap
from hami.scheduler.engine import reasons as r
from hami.scheduler.engine.decision import FilterResult, commit, filter_pod
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.ranking import Ranker
from hami.scheduler.engine.requests import PERCENT_UNSET, PodRequest, pod_request
from hami.scheduler.engine.usage import DeviceShare, PodAllocation, UsageIndex
from hami.tune.simulate import cluster as cl
from hami.tune.simulate.scenario import Scenario

# Event kinds, in the order they run at one instant: capacity frees up before pods arrive.
DEPART, GIVE_UP, ARRIVE, RETRY = 0, 1, 2, 3
BACKOFF_INITIAL, BACKOFF_MAX = 1.0, 10.0  # kube-scheduler's podInitialBackoffSeconds / podMaxBackoffSeconds
SAMPLES = 120
NO_REQUEST = "asks for no GPU under the snapshot's device config"
Placement = tuple[str | None, tuple[tuple[str, ...], ...]]
SEARCH_STEPS = 5000  # filter calls spent looking for the order of one second's events
GROUP_PERMUTE = 4  # waiting pods created at one time whose retry orders are all tried
# Placements this close count as the same moment: the API's times are whole seconds, and a pod created
# at the end of one second is often filtered in the next.
SAME_TIME = 1.0
# Rankings kept (one per request shape): a history has more shapes than a burst of filter calls.
RANKINGS = 128


@dataclass
class PodRun:
    """One pod's fate in the replay."""

    pod: snap.Pod
    request: PodRequest | None  # None: it asks for no device under this device config
    shape: str  # pods with equal shape ask for the same thing
    fixed: bool  # placed outside the scheduler: holds its recorded devices
    node: str | None = None
    devices: PodDevices = ()
    placed_at: float | None = None
    left_at: float | None = None
    attempts: int = 0
    bind_failures: int = 0
    backoff: bool = False
    reason: str = ""  # the last filter's failure, summarised
    record: Placement | None = None  # recorded_placement(pod), once needed
    error: str = ""  # the pod itself is invalid (never placed)

    @property
    def wait(self) -> float | None:
        return None if self.placed_at is None else self.placed_at - self.pod.created


@dataclass(frozen=True)
class Sample:
    t: float
    pending: int
    running: int
    mem_mib: int  # allocated GPU memory
    cores: int  # allocated cores (100 = a card)
    free_mib: int  # unallocated memory on usable cards
    stranded_mib: int  # of it, on cards that cannot take a typical request
    overcommitted: int  # cards whose allocation exceeds their physical memory
    headroom_mib: int  # least (physical - allocated) over cards
    peak_headroom_mib: int | None  # least (physical - sum of holders' peak use), when peaks are known


@dataclass
class Capacity:
    cards: int = 0
    mem_mib: int = 0  # registered (scaled)
    physical_mib: int = 0
    cores: int = 0
    slots: int = 0


@dataclass
class ReplayResult:
    order: list[str]  # arrivals and departures in the order the replay took them (``_key``)
    scenario: Scenario
    cluster: cl.Cluster
    runs: list[PodRun]
    samples: list[Sample]
    capacity: Capacity
    start: float
    end: float
    typical: tuple[int, int]  # (MiB, cores) of the median request
    mem_area: float = 0.0  # ∫ allocated MiB dt
    core_area: float = 0.0
    locked_seconds: float = 0.0  # node-seconds under a stuck lock within the window
    notes: list[str] = field(default_factory=list)


def _shape(request: PodRequest | None, namespace: str, limited: bool) -> str:
    if request is None:
        return ""
    return repr((request.reqs, request.n_init, request.options, namespace if limited else ""))


def _median(values: Sequence[int]) -> int:
    return int(statistics.median(values)) if values else 0


class _Trial:
    """Pods a search step placed and pods waiting, while ``Replay._resolve`` tries orders."""

    def __init__(self, waiting: list[PodRun]) -> None:
        self.waiting = list(waiting)
        self.placed: set[str] = set()

    def save(self) -> tuple[int, frozenset[str]]:
        return len(self.waiting), frozenset(self.placed)

    def restore(self, state: tuple[int, frozenset[str]]) -> None:
        del self.waiting[state[0] :]
        self.placed = set(state[1])

    def potential(self, rest: Sequence[int], items: Sequence[tuple[int, PodRun]], due: set[str]) -> int:
        """The most a search step can still gain (an upper bound): every arrival left, and every
        pod the snapshot places in this second (``due``) not placed yet."""
        return sum(1 for i in rest if items[i][0] == ARRIVE) + len(due) - len(due & self.placed)


class Replay:
    """One replay; ``order`` (a previous replay's ``ReplayResult.order``) fixes the order of pods
    created in the same second instead of matching them to their recorded placements."""

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
        self.pending: dict[str, PodRun] = {}
        self.events: list[tuple[float, int, int, PodRun]] = []
        self._seq = 0
        self.start, self.end = snapshot.start, snapshot.taken
        self.locks = self._lock_intervals()
        self.capacity = self._capacity()
        runs = [self._run(p) for p in sorted(snapshot.pods, key=lambda p: (p.created, p.namespace, p.name))]
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
        )
        self._sample_times = self._grid(samples)
        self._last_t = self.start
        self._mem = self._cores = 0
        self._peaks = any(p.peak_memory_bytes for p in snapshot.pods)
        self._undo: list[tuple[str, PodAllocation | None]] = []  # trial changes to the usage index
        self._idle: dict[str, tuple[int, int, int, int]] = {}  # _card_figures of nodes without usage

    # --- set-up ---------------------------------------------------------------------------------

    def _run(self, pod: snap.Pod) -> PodRun:
        fixed = pod.allocation is not None and pod.scheduled is None
        request = pod_request(pod.as_object(), self.config.nvidia)
        return PodRun(pod, request, _shape(request, pod.namespace, self.quotas.limited(pod.namespace)), fixed)

    def _lock_intervals(self) -> dict[str, list[tuple[float, float]]]:
        expire, current = self.cluster.lock_expire, self.snapshot.scheduler.node_lock_expire
        out: dict[str, list[tuple[float, float]]] = {}
        for lock in self.snapshot.locks:
            until = lock.since + expire
            # A lock that lasted its full expiry was broken by expiry: under another expiry it lasts that.
            if lock.released is not None and lock.released - lock.since < current:
                until = min(until, lock.released)
            out.setdefault(lock.node, []).append((lock.since, until))
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

    # --- the event loop -------------------------------------------------------------------------

    def _push(self, t: float, kind: int, run: PodRun) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, kind, self._seq, run))

    def run(self) -> ReplayResult:
        for run in self.runs:
            self._push(run.pod.created, ARRIVE, run)
            if run.pod.allocation is None and run.pod.finished is not None:
                self._push(run.pod.finished, GIVE_UP, run)
        samples = iter(self._sample_times)
        next_sample = next(samples, None)
        while self.events:
            t, kind, _, run = heapq.heappop(self.events)
            if t > self.end:
                break
            while next_sample is not None and next_sample < t:
                self._sample(next_sample)
                next_sample = next(samples, None)
            self._advance(t)
            if kind == RETRY:
                run.backoff = False
                if run.placed_at is None and run.pod.uid in self.pending:
                    self._attempt(run, t, self.all_nodes)
                continue
            leaving: list[tuple[int, PodRun]] = []
            arriving: list[PodRun] = []
            while True:
                (arriving.append(run) if kind == ARRIVE else leaving.append((kind, run)))
                if not self.events or self.events[0][0] != t or self.events[0][1] == RETRY:
                    break
                _, kind, _, run = heapq.heappop(self.events)
            self._instant(t, leaving, arriving)
        while next_sample is not None:
            self._sample(next_sample)
            next_sample = next(samples, None)
        self._advance(self.end)
        self.result.locked_seconds = sum(
            max(min(b, self.end) - max(a, self.start), 0.0) for spans in self.locks.values() for a, b in spans
        )
        self.result.notes = [f"node {n} left out: {why}" for n, why in self.cluster.skipped.items()]
        return self.result

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

    def _instant(self, t: float, leaving: list[tuple[int, PodRun]], arriving: list[PodRun]) -> None:
        """What the snapshot records at one time (one second, for the API's times): departures,
        give-ups and arrivals, whose true order is lost. Pods placed outside the scheduler come
        first. Unless ``order`` fixes it, the replay takes the order in which the most arrivals get
        what the snapshot recorded for them (``_resolve``); ``order`` sorts the items by where they
        came in that replay (departures before arrivals when they were not at this time there)."""
        for run in arriving:
            if run.fixed:
                self._arrive(run, t)
        items: list[tuple[int, PodRun]] = [*leaving, *((ARRIVE, run) for run in arriving if not run.fixed)]
        if self.rank is not None:
            rank, last = self.rank, len(self.rank)
            chosen: Sequence[int] = sorted(
                range(len(items)), key=lambda i: (rank.get(_key(*items[i]), last), items[i][0] == ARRIVE, i)
            )
        elif len(items) < 2 or (not self.pending and all(kind != ARRIVE for kind, _ in items)):
            chosen = range(len(items))  # nothing to choose, or departures that retry no one
        else:
            chosen = self._resolve(items, t)
        for i in chosen:
            kind, run = items[i]
            self.result.order.append(_key(kind, run))
            if kind == ARRIVE:
                self._arrive(run, t)
            else:
                self._leave(kind, run, t)

    def _resolve(self, items: list[tuple[int, PodRun]], t: float) -> Sequence[int]:
        """The order of ``items`` under which the most pods get the outcome the snapshot recorded
        for this second, found depth-first: each step takes an arrival whose filter gives its
        recorded outcome, or the next departure (with the retries it causes), or, when neither is
        left, the next arrival. The first order that reproduces everything wins at once; after
        ``SEARCH_STEPS`` filter calls the best so far does (a path cut short keeps the rest in
        their default order: departures first, then arrivals by name)."""
        waiting = [run for run in self.pending.values() if not run.backoff]
        arrivals = [run for kind, run in items if kind == ARRIVE]
        due = {run.pod.uid for run in (*waiting, *arrivals) if self._expected(run, t)[0] is not None}
        perfect = len(due | {run.pod.uid for run in arrivals})
        best_score, best_order = -len(items) - len(waiting) - 1, list(range(len(items)))
        budget = [SEARCH_STEPS]
        trial = _Trial(waiting)

        def dfs(rest: list[int], score: int, path: list[int]) -> None:
            nonlocal best_score, best_order
            if score + trial.potential(rest, items, due) <= best_score:
                return
            if not rest or budget[0] <= 0:
                # A complete order, or out of budget: the rest as they come.
                if score > best_score:
                    best_score, best_order = score, path + rest
                return
            branches: list[tuple[int, FilterResult | None]] = []
            for i in rest:
                kind, run = items[i]
                if kind == ARRIVE and budget[0] > 0:
                    budget[0] -= 1
                    result = self._filter(run, self.all_nodes)
                    if filter_placement(result) == self._expected(run, t):
                        branches.append((i, result))
            branches += [(i, None) for i in rest if items[i][0] != ARRIVE]
            if not branches:
                branches.append((rest[0], None))
            for i, found in branches:
                mark, state = len(self._undo), trial.save()
                gained = self._trial_step(items[i], t, trial, found, budget)
                path.append(i)
                dfs([j for j in rest if j != i], score + gained, path)
                path.pop()
                self._undo_to(mark)
                trial.restore(state)
                if best_score >= perfect:
                    return

        dfs(list(range(len(items))), 0, [])
        return best_order

    def _expected(self, run: PodRun, t: float) -> Placement:
        """What the snapshot says the filter gave the pod at ``t``: its placement when it was
        scheduled at that time (the API's times are whole seconds), else no node (it waited).
        """
        pod = run.pod
        if pod.scheduled is not None and pod.scheduled != t:
            return None, ()
        if run.record is None:
            run.record = recorded_placement(pod)
        return run.record

    def _trial_step(
        self,
        item: tuple[int, PodRun],
        t: float,
        trial: _Trial,
        result: FilterResult | None,
        budget: list[int],
    ) -> int:
        """Apply one item to the usage index alone (logged in ``_undo``): an arrival is placed or
        waits, a departure frees its cards and retries the waiting pods as ``_retry_after`` does.
        Returns how many pods got their recorded outcome (minus those placed that should wait)."""
        kind, run = item
        if kind == ARRIVE:
            if result is None:
                budget[0] -= 1
                result = self._filter(run, self.all_nodes)
            if result.node is None or result.reservation is None:
                trial.waiting.append(run)
                return int(self._expected(run, t)[0] is None)  # it waited, as recorded
            self._trial_commit(run, result, trial)
            return int(filter_placement(result) == self._expected(run, t))
        old = self.usage.remove(run.pod.uid)
        if old is None:
            return 0
        self.quotas.remove_usage(old.namespace, old.shares)
        self._undo.append(("", old))
        gained = 0

        def place(other: PodRun, nodes: Sequence[NodeState]) -> bool:
            nonlocal gained
            budget[0] -= 1
            got = self._filter(other, nodes)
            if got.node is None or got.reservation is None:
                return False
            self._trial_commit(other, got, trial)
            expected = self._expected(other, t)
            gained += 1 if filter_placement(got) == expected else -1 if expected[0] is None else 0
            return True

        self._retry_pass(
            trial.waiting, old.node, old.namespace, t, place=place, skip=lambda r: r.pod.uid in trial.placed
        )
        return gained

    def _retry_pass(
        self,
        waiting: Sequence[PodRun],
        node: str,
        namespace: str,
        t: float,
        *,
        place: Callable[[PodRun, Sequence[NodeState]], bool],
        skip: Callable[[PodRun], bool],
    ) -> None:
        """Retry waiting pods after capacity freed on ``node`` (and quota in ``namespace``), in
        kube-scheduler's order: as they arrived. ``place`` filters and commits one pod over the
        nodes given and says whether it was placed. Pods created at the same (whole-second) time
        came in an order that is lost: under the snapshot's own configuration each step of such a
        group takes the first pod whose filter gives what the snapshot recorded for it at ``t``.
        A request shape refused on ``node`` in this pass is not tried there again."""
        state = self.cluster.by_name.get(node)
        quota_freed = self.quotas.limited(namespace)
        refused: set[str] = set()

        def nodes_for(run: PodRun) -> Sequence[NodeState] | None:
            if quota_freed and run.pod.namespace == namespace:
                return self.all_nodes
            if state is None or run.shape in refused:
                return None
            return [state]

        queue = sorted((run for run in waiting if not skip(run)), key=lambda run: run.pod.created)
        for _, same in groupby(queue, key=lambda run: run.pod.created):
            group = list(same)
            if self.rank is None and 1 < len(group) <= GROUP_PERMUTE:
                group = self._group_order(group, nodes_for, t)
            while group:
                pick = 0
                if self.rank is None and len(group) > 1:
                    for k, run in enumerate(group):
                        nodes = nodes_for(run)
                        if nodes is not None and filter_placement(self._filter(run, nodes)) == self._expected(
                            run, t
                        ):
                            pick = k
                            break
                run = group.pop(pick)
                nodes = nodes_for(run)
                if nodes is not None and not place(run, nodes) and nodes is not self.all_nodes:
                    refused.add(run.shape)

    def _group_order(
        self, group: list[PodRun], nodes_for: Callable[[PodRun], Sequence[NodeState] | None], t: float
    ) -> list[PodRun]:
        """The order of a few waiting pods created at the same time under which the most of them
        get what the snapshot recorded at ``t`` (each order tried on the usage index and undone)."""
        best: tuple[int, tuple[int, ...]] = (-1, tuple(range(len(group))))
        for perm in permutations(range(len(group))):
            mark, score = len(self._undo), 0
            for i in perm:
                run = group[i]
                nodes = nodes_for(run)
                if nodes is None:
                    continue
                got = self._filter(run, nodes)
                if got.node is not None and got.reservation is not None:
                    commit(got, self.usage, self.quotas)
                    self._undo.append((run.pod.uid, got.replaced))
                score += filter_placement(got) == self._expected(run, t)
            self._undo_to(mark)
            if score > best[0]:
                best = (score, perm)
                if score == len(group):
                    break
        return [group[i] for i in best[1]]

    def _trial_commit(self, run: PodRun, result: FilterResult, trial: _Trial) -> None:
        commit(result, self.usage, self.quotas)
        self._undo.append((run.pod.uid, result.replaced))
        trial.placed.add(run.pod.uid)

    def _undo_to(self, mark: int) -> None:
        """Undo trial changes to the usage index back to ``len(self._undo) == mark``."""
        while len(self._undo) > mark:
            uid, old = self._undo.pop()
            if uid:  # a trial placement: drop it, restore what it replaced
                gone = self.usage.remove(uid)
                if gone is not None:
                    self.quotas.remove_usage(gone.namespace, gone.shares)
                if old is None:
                    continue
            assert old is not None
            self.usage.add(old)
            self.quotas.add_usage(old.namespace, old.shares)

    def _leave(self, kind: int, run: PodRun, t: float) -> None:
        if kind == DEPART:
            self._depart(run, t)
        elif run.placed_at is None:
            self._give_up(run)

    def _arrive(self, run: PodRun, t: float) -> None:
        if run.fixed:
            alloc = cl.reservation(run.pod)
            if alloc is None:
                run.error = "its recorded allocation does not decode"
                return
            self._hold(alloc)
            assert run.pod.allocation is not None
            run.node, run.placed_at = run.pod.allocation.node, t
            run.devices = cl.recorded_devices(run.pod) or ()
            if run.pod.finished is not None:
                self._push(run.pod.finished, DEPART, run)
            return
        self._attempt(run, t, self.all_nodes)

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

    def _locked(self, node: str, t: float) -> bool:
        return any(a <= t < b for a, b in self.locks.get(node, ()))

    def _filter(self, run: PodRun, nodes: Sequence[NodeState]) -> FilterResult:
        if run.request is None:
            return FilterResult(error=NO_REQUEST)
        ranks = self.ranks if nodes is self.all_nodes else None
        return filter_pod(run.request, nodes, self.usage, self.quotas, self.config, ranks=ranks)

    def _attempt(self, run: PodRun, t: float, nodes: Sequence[NodeState]) -> bool:
        """Filter the pod over ``nodes``; True when it was placed (or its bind failed on a lock)."""
        result = self._filter(run, nodes)
        run.attempts += 1
        if result.error is not None:
            run.error = result.error
            self.pending.pop(run.pod.uid, None)
            return False
        if result.node is None:
            if nodes is self.all_nodes:
                run.reason = _summary(result.failed)
            self.pending.setdefault(run.pod.uid, run)
            return False
        if result.replaced is not None:
            self._account(result.replaced.shares, -1)
        commit(result, self.usage, self.quotas)
        assert result.reservation is not None
        self._account(result.reservation.shares, 1)
        moved = (
            result.replaced.node
            if result.replaced is not None and result.replaced.node != result.node
            else None
        )
        if self._locked(result.node, t):
            # Bind fails on the lock; the reservation stays until kube-scheduler's retry.
            run.bind_failures += 1
            run.backoff = True
            run.reason = f"bind refused: node {result.node} locked"
            self.pending.setdefault(run.pod.uid, run)
            self._push(self._next_retry(run, result.node, t), RETRY, run)
        else:
            self.pending.pop(run.pod.uid, None)
            run.node, run.devices, run.placed_at = result.node, result.devices, t
            end = self._departure(run, t)
            if end is not None:
                self._push(end, DEPART, run)
        if moved is not None:
            self._retry_after(moved, run.pod.namespace, t)
        return True

    def _next_retry(self, run: PodRun, node: str, t: float) -> float:
        """kube-scheduler's next retry after a bind refused by ``node``'s lock. Once the back-off
        is at its maximum the retries fall on a 10 s grid; those before the lock ends or anything
        else happens would filter the same state again and fail the same way, so the next one is
        the first grid point after either (exact, and bounded however long the lock lasts); the
        ones skipped still count as refused binds."""
        delay = min(BACKOFF_INITIAL * 2.0 ** (run.bind_failures - 1), BACKOFF_MAX)
        if delay < BACKOFF_MAX:
            return t + delay
        spans: list[tuple[float, float]] = self.locks.get(node, [])
        until: float = min((b for a, b in spans if a <= t < b), default=t)
        if self.events:
            until = min(until, self.events[0][0])
        steps = max(math.ceil((until - t) / BACKOFF_MAX), 1)
        # The retries skipped would each have been refused too (those before the history ends).
        run.bind_failures += min(steps - 1, max(int((self.end - t) // BACKOFF_MAX), 0))
        return t + steps * BACKOFF_MAX

    def _departure(self, run: PodRun, t: float) -> float | None:
        pod = run.pod
        if pod.finished is None:
            return None
        if pod.allocation is None:
            return max(pod.finished, t)  # deleted at ``finished`` in the snapshot
        began = pod.scheduled if pod.scheduled is not None else pod.created
        if abs(t - began) <= SAME_TIME:
            return pod.finished  # placed when it was there: it leaves when it left
        return t + max(pod.finished - began, 0.0)

    def _depart(self, run: PodRun, t: float) -> None:
        old = self._release(run.pod.uid)
        run.left_at = t
        if old is not None:
            self._retry_after(old.node, old.namespace, t)

    def _give_up(self, run: PodRun) -> None:
        self.pending.pop(run.pod.uid, None)
        old = self._release(run.pod.uid)
        run.reason = run.reason or "deleted while waiting"
        if old is not None:
            self._retry_after(old.node, old.namespace, run.pod.finished or self.end)

    def _retry_after(self, node: str, namespace: str, t: float) -> None:
        """Capacity freed on ``node`` (and quota in ``namespace``): waiting pods try again."""
        self._retry_pass(
            list(self.pending.values()),
            node,
            namespace,
            t,
            place=lambda run, nodes: self._attempt(run, t, nodes),
            skip=lambda run: run.backoff or run.placed_at is not None,
        )

    # --- samples --------------------------------------------------------------------------------

    def _card_figures(
        self, node: NodeState, usage: dict[str, tuple[int, int, int]]
    ) -> tuple[int, int, int, int]:
        """(free MiB on usable cards, of it stranded, cards over-committed, least headroom MiB)."""
        typ_mem, typ_cores = self.result.typical
        free = stranded = over = 0
        headroom: int | None = None
        for d in node.devices:
            slots, mem, cores = usage.get(d.id, (0, 0, 0))
            physical = self.cluster.physical_mib.get(d.id, d.devmem)
            room = physical - mem
            headroom = room if headroom is None else min(headroom, room)
            over += mem > physical
            if not d.health or d.mode == MODE_MIG or d.id in node.cordoned:
                continue
            spare = max(d.devmem - mem, 0)
            free += spare
            if slots >= d.count or spare < typ_mem or d.devcore - cores < typ_cores:
                stranded += spare
        return free, stranded, over, headroom if headroom is not None else 0

    def _sample(self, t: float) -> None:
        free = stranded = over = 0
        headroom: int | None = None
        held_peak = self._peak_by_card() if self._peaks else None
        peak_headroom: int | None = None
        for node in self.cluster.nodes:
            usage = self.usage.node_usage(node.name)
            figures = self._idle.get(node.name) if not usage else None
            if figures is None:
                figures = self._card_figures(node, usage)
                if not usage:
                    self._idle[node.name] = figures
            free, stranded, over = free + figures[0], stranded + figures[1], over + figures[2]
            headroom = figures[3] if headroom is None else min(headroom, figures[3])
            if held_peak is not None:
                for d in node.devices:
                    left = self.cluster.physical_mib.get(d.id, d.devmem) - held_peak.get(d.id, 0)
                    peak_headroom = left if peak_headroom is None else min(peak_headroom, left)
        running = sum(1 for _ in self.usage.pods())
        self.result.samples.append(
            Sample(
                t,
                len(self.pending),
                running,
                self._mem,
                self._cores,
                free,
                stranded,
                over,
                headroom or 0,
                peak_headroom,
            )
        )

    def _peak_by_card(self) -> dict[str, int]:
        """Per card, the sum of its holders' peak use, each pod's peak split over its cards by share."""
        peaks = {run.pod.uid: run.pod.peak_memory_bytes for run in self.runs if run.pod.peak_memory_bytes}
        out: dict[str, int] = {}
        for alloc in self.usage.pods():
            peak = peaks.get(alloc.uid)
            total = sum(s.usedmem for s in alloc.shares)
            for s in alloc.shares:
                share = s.usedmem if peak is None or not total else int(peak / (1 << 20) * s.usedmem / total)
                out[s.uuid] = out.get(s.uuid, 0) + share
        return out


def _summary(failed: Mapping[str, str]) -> str:
    """The most common reason across nodes, e.g. ``CardInsufficientMemory on 12 of 20 nodes``."""
    counts: dict[str, int] = {}
    for text in failed.values():
        for code in r.parse_reason(text) or {text: 1}:
            counts[code] = counts.get(code, 0) + 1
    if not counts:
        return "no node"
    code, n = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
    return f"{code} on {n} of {len(failed)} nodes"


def _key(kind: int, run: PodRun) -> str:
    """An item's name in ``ReplayResult.order``: the pod's uid for its arrival, with a suffix for
    its departure or give-up."""
    return run.pod.uid if kind == ARRIVE else f"{run.pod.uid}/{kind}"


def recorded_placement(pod: snap.Pod) -> Placement:
    """Node and per-container card UUIDs the snapshot recorded; (None, ()) when never placed."""
    if pod.allocation is None:
        return None, ()
    return placement(pod.allocation.node, cl.recorded_devices(pod) or ())


def filter_placement(result: FilterResult) -> Placement:
    return placement(result.node, result.devices)


def placement(node: str | None, devices: PodDevices) -> Placement:
    """Node and per-container card UUIDs, trailing containers without cards dropped."""
    cards = [tuple(d.uuid for d in container) for container in devices]
    while cards and not cards[-1]:
        cards.pop()
    return node, tuple(cards)


def replay(
    snapshot: snap.Snapshot, scenario: Scenario, samples: int = SAMPLES, order: Sequence[str] | None = None
) -> ReplayResult:
    return Replay(snapshot, scenario, samples, order).run()
