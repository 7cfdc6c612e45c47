"""The search for the order of one second's events, and the retry pass that waiting pods go through."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import groupby, permutations

from hami.scheduler.engine.decision import FilterResult, commit
from hami.scheduler.engine.nodes import NodeState
from hami.tune.simulate.engine_state import ReplayState
from hami.tune.simulate.records import (
    ARRIVE,
    Placement,
    PodRun,
    arrival_order,
    filter_placement,
    recorded_placement,
)

SEARCH_STEPS = 5000  # filter calls spent looking for the order of one second's events
GROUP_PERMUTE = 4  # waiting pods created at one time whose retry orders are all tried


class _Trial:
    """Pods a search step placed and pods waiting, while ``OrderSearch._resolve`` tries orders."""

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


class OrderSearch(ReplayState):
    """Orders the replay cannot know: of one second's events (``_resolve``) and of waiting pods
    created at the same time (``_retry_pass``), each tried on the usage index and undone."""

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
        # Arrivals whose first filter the snapshot dates (their events) come in that order.
        known = {
            i: run.pod.first_attempt
            for i, (kind, run) in enumerate(items)
            if kind == ARRIVE and run.pod.first_attempt is not None
        }

        def dfs(rest: list[int], score: int, path: list[int]) -> None:
            nonlocal best_score, best_order
            if score + trial.potential(rest, items, due) <= best_score:
                return
            if not rest or budget[0] <= 0:
                # A complete order, or out of budget: the rest as they come.
                if score > best_score:
                    best_score, best_order = score, path + rest
                return
            dated = [i for i in rest if i in known]
            first = min(dated, key=known.__getitem__) if dated else None
            branches: list[tuple[int, FilterResult | None]] = []
            for i in rest:
                kind, run = items[i]
                if kind == ARRIVE and budget[0] > 0 and (i not in known or i == first):
                    budget[0] -= 1
                    result = self._filter(run, self.all_nodes)
                    if filter_placement(result) == self._expected(run, t):
                        branches.append((i, result))
            branches += [(i, None) for i in rest if items[i][0] != ARRIVE]
            if not branches:
                undated = [i for i in rest if i not in known]
                branches.append((first if first is not None else undated[0], None))
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
        state = self.by_name.get(node)
        quota_freed = self.quotas.limited(namespace)
        refused: set[str] = set()

        def nodes_for(run: PodRun) -> Sequence[NodeState] | None:
            if quota_freed and run.pod.namespace == namespace:
                return self.all_nodes
            if state is None or run.shape in refused:
                return None
            return [state]

        queue = sorted((run for run in waiting if not skip(run)), key=lambda run: arrival_order(run.pod))
        for _, same in groupby(queue, key=lambda run: run.pod.created):
            group = list(same)
            # dated by their events: they retry in the order they came (``arrival_order``)
            search = self.rank is None and any(run.pod.first_attempt is None for run in group)
            if search and 1 < len(group) <= GROUP_PERMUTE:
                group = self._group_order(group, nodes_for, t)
            while group:
                pick = 0
                if search and len(group) > 1:
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
