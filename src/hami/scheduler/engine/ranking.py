"""Incremental fit verdicts and node order for filter calls that repeat a request shape.

kube-scheduler sends the same candidate list on every filter call, and between two calls only the
nodes that the last binds touched change. A ``Ranking`` keeps each candidate's fit verdict and the
fitting nodes in ``pick_node``'s order, and on the next call revisits only the positions whose
``NodeState`` is a different object (re-registered) or whose usage ``UsageIndex`` reports changed.

Only for order-free contexts without a previous reservation (``filter_pod`` checks): there a
node's verdict depends on the request shape and the node's view alone. Not thread-safe (the filter
runs under the state lock).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import compress, count
from operator import attrgetter, is_not, itemgetter

from hami.scheduler.engine.fit import PodContext, fits_quickly
from hami.scheduler.engine.nodes import NodeState, NodeView
from hami.scheduler.engine.usage import UsageIndex

_name = attrgetter("name")

# (score, or -score for spread; -position): ascending order is pick_node's, chosen node last.
Key = tuple[float, int]


class Ranking:
    """One request shape's verdicts over one candidate list, updated in place."""

    def __init__(self, spread: bool) -> None:
        self.spread = spread
        self.nodes: list[NodeState] = []
        self.names: list[str] = []
        self.views: list[NodeView] = []
        self.verdicts: list[bool | str] = []
        self.keys: list[Key] = []
        self.ranked: list[NodeView] = []  # fitting views, parallel to ``keys``
        self.failed: dict[str, str] = {}  # the other nodes' reasons, in candidate order
        self.positions: dict[str, int] | None = None  # None when a name is listed twice
        self.usage: UsageIndex | None = None
        self.seq = 0  # ``usage``'s change number this ranking is up to date with

    def _key(self, position: int, view: NodeView) -> Key:
        return (-view.score if self.spread else view.score, -position)

    def update(self, nodes: Sequence[NodeState], usage: UsageIndex, ctx: PodContext) -> None:
        touched = usage.touched_since(self.seq) if usage is self.usage else None
        if len(nodes) != len(self.nodes) or touched is None or (touched and self.positions is None):
            self._rebuild(nodes, usage, ctx)
            return
        changed: set[int] = set()
        if nodes != self.nodes:  # NodeState compares by identity
            changed.update(compress(count(), map(is_not, nodes, self.nodes)))
        if touched:
            assert self.positions is not None
            changed.update(i for i in map(self.positions.get, touched) if i is not None)
        self.usage, self.seq = usage, usage.seq
        failed_changed = False
        for i in sorted(changed):
            node = nodes[i]
            if node.name != self.names[i]:  # another candidate list of the same length
                self._rebuild(nodes, usage, ctx)
                return
            view = usage.view(node)
            before = self.verdicts[i]
            if before is True:
                at = bisect_left(self.keys, self._key(i, self.views[i]))
                del self.keys[at], self.ranked[at]
            verdict = fits_quickly(view, ctx)
            if verdict is True:
                key = self._key(i, view)
                at = bisect_left(self.keys, key)
                self.keys.insert(at, key)
                self.ranked.insert(at, view)
            failed_changed |= verdict is not True or before is not True
            self.nodes[i], self.views[i], self.verdicts[i] = node, view, verdict
        if failed_changed:
            self._collect_failed()

    def _rebuild(self, nodes: Sequence[NodeState], usage: UsageIndex, ctx: PodContext) -> None:
        self.nodes = list(nodes)
        self.names = list(map(_name, nodes))
        positions = {name: i for i, name in enumerate(self.names)}
        self.positions = positions if len(positions) == len(self.names) else None
        self.usage, self.seq = usage, usage.seq
        self.views = usage.views(nodes)
        self.verdicts = [fits_quickly(view, ctx) for view in self.views]
        pairs = sorted(
            (
                (self._key(i, view), view)
                for i, (view, verdict) in enumerate(zip(self.views, self.verdicts, strict=True))
                if verdict is True
            ),
            key=itemgetter(0),
        )
        self.keys = [key for key, _ in pairs]
        self.ranked = [view for _, view in pairs]
        self._collect_failed()

    def _collect_failed(self) -> None:
        pairs = zip(self.names, self.verdicts, strict=True)
        self.failed = {name: str(verdict) for name, verdict in pairs if verdict is not True}


class Ranker:
    """Rankings by (request shape, spread policy); the ``size`` most recently used are kept."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._rankings: dict[tuple[str, bool], Ranking] = {}

    def rank(
        self, nodes: Sequence[NodeState], usage: UsageIndex, ctx: PodContext, *, spread: bool,
    ) -> Ranking:
        key = (ctx.shape, spread)
        ranking = self._rankings.pop(key, None)
        if ranking is None:
            ranking = Ranking(spread)
            if len(self._rankings) >= self.size:
                del self._rankings[next(iter(self._rankings))]
        self._rankings[key] = ranking
        ranking.update(nodes, usage, ctx)
        return ranking
