"""The replay: a snapshot's pods through the scheduling engine, in arrival order, with departures.

Every decision is the extender's own: ``filter_pod`` over the registered nodes with the usage index
and quota manager, then ``commit``. Around it the replay plays kube-scheduler and the cluster:

- A pod is filtered when it arrives (its creation time). The API keeps times to the second, so
  the order of what happened within one second (arrivals, departures, the retries they caused)
  is lost there. Pods whose events dated their first filter (``first_attempt``) arrive, and are
  retried, in that order. For the rest, and for departures, under the snapshot's own
  configuration the replay searches, for each second, for the
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
from collections.abc import Mapping, Sequence

from hami.core import reasons as r
from hami.core.snapshot import model as snap
from hami.scheduler.engine.decision import commit
from hami.scheduler.engine.nodes import NodeState
from hami.tune.simulate import cluster as cl
from hami.tune.simulate.order_search import OrderSearch
from hami.tune.simulate.records import ARRIVE, DEPART, GIVE_UP, RETRY, SAMPLES, PodRun, ReplayResult
from hami.tune.simulate.sampling import Sampling
from hami.tune.simulate.scenario import Scenario

BACKOFF_INITIAL, BACKOFF_MAX = 1.0, 10.0  # kube-scheduler's podInitialBackoffSeconds / podMaxBackoffSeconds
# Placements this close count as the same moment: the API's times are whole seconds, and a pod created
# at the end of one second is often filtered in the next.
SAME_TIME = 1.0


class Replay(OrderSearch, Sampling):
    """One replay; ``order`` (a previous replay's ``ReplayResult.order``) fixes the order of pods
    created in the same second instead of matching them to their recorded placements."""

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
            self._outages_at(t)
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
        spans = [(a, b) for held in self.locks.values() for a, b, _ in held]
        self.result.locked_seconds = sum(max(min(b, self.end) - max(a, self.start), 0.0) for a, b in spans)
        self.result.notes = [f"node {n} left out: {why}" for n, why in self.cluster.skipped.items()]
        return self.result

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
        if self._locked(result.node, t, run.pod.key):
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
        spans = self.locks.get(node, [])
        until: float = min((b for a, b, _ in spans if a <= t < b), default=t)
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


def replay(
    snapshot: snap.Snapshot, scenario: Scenario, samples: int = SAMPLES, order: Sequence[str] | None = None
) -> ReplayResult:
    return Replay(snapshot, scenario, samples, order).run()
