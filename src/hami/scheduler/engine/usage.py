"""Node usage from the pods' allocation annotations (§6.2) and the init-container collapse (§6.3).

Input is already decoded: each pod's ``PodDevices`` (``hami.io/vgpu-devices-allocated``, one entry
per container, init containers first) plus its identity and MIG reservations
(``hami.io/vgpu-mig-allocations``). ``UsageIndex`` keeps per-node, per-UUID totals and MIG
placements incrementally and caches one ``NodeView`` per node until that node's usage changes.

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from hami.core.devices import MigAllocation, MigPlacement, PodDevices
from hami.scheduler.engine.nodes import NodeState, NodeView


@dataclass(frozen=True)
class DeviceShare:
    """What one pod holds on one GPU after the collapse: ``slots`` counts toward the split count."""

    uuid: str
    usedmem: int
    usedcores: int
    slots: int = 1


@dataclass(frozen=True)
class PodAllocation:
    """A pod's reservation on a node (HAMi ``PodInfo``), shares sorted by UUID.

    ``mig`` are its MIG reservations; ``unreserved`` the UUIDs of its container devices that have
    none (``mig.unreserved``): on a ``mig`` card such an entry makes the card unusable (§6.2).
    """

    uid: str
    namespace: str
    name: str
    node: str
    shares: tuple[DeviceShare, ...]
    mig: tuple[MigAllocation, ...] = ()
    unreserved: frozenset[str] = frozenset()


def collapse_init_containers(
    devices: PodDevices, n_init: int, app_only: bool = False,
) -> tuple[DeviceShare, ...]:
    """HAMi ``CollapseInitContainerUsage`` (or ``AppContainersOnlyDeviceUsage`` with ``app_only``).

    Init containers run one after another, so per UUID they need the max of their memory and
    cores; app containers run together, so they need the sum. The pod holds the larger of the two.
    """
    init: dict[str, tuple[int, int]] = {}
    app: dict[str, tuple[int, int, int]] = {}
    for idx, container in enumerate(devices):
        is_init = idx < n_init
        if is_init and app_only:
            continue
        for d in container:
            if is_init:
                m, c = init.get(d.uuid, (0, 0))
                init[d.uuid] = (max(m, d.usedmem), max(c, d.usedcores))
            else:
                m, c, s = app.get(d.uuid, (0, 0, 0))
                app[d.uuid] = (m + d.usedmem, c + d.usedcores, s + 1)
    shares = []
    for uuid in sorted(init.keys() | app.keys()):
        im, ic = init.get(uuid, (0, 0))
        am, ac, slots = app.get(uuid, (0, 0, 0))
        shares.append(DeviceShare(uuid, max(im, am), max(ic, ac), max(slots, 1)))
    return tuple(shares)


def quota_usage(shares: Iterable[DeviceShare]) -> tuple[int, int]:
    """Memory and cores a pod counts against its namespace's quota (HAMi ``countPodDevices``)."""
    mem = cores = 0
    for s in shares:
        mem += s.usedmem
        cores += s.usedcores
    return mem, cores


class UsageIndex:
    """Per-node device usage of all reserved or running GPU pods; not thread-safe (callers lock)."""

    def __init__(self, touch_log: int = 8192) -> None:
        self._pods: dict[str, PodAllocation] = {}
        # node -> UUID -> [slots, MiB, cores, pods with an unreserved entry on it]
        self._nodes: dict[str, dict[str, list[int]]] = {}
        # node -> UUID -> MIG placements reserved on it (only nodes with MIG reservations)
        self._placements: dict[str, dict[str, list[MigPlacement]]] = {}
        self._views: dict[str, NodeView] = {}
        # Nodes in the order their usage changed; the oldest half is dropped past ``touch_log``.
        self._touched: list[str] = []
        self._touched_base = 0
        self._touch_log = touch_log

    def add(self, alloc: PodAllocation) -> bool:
        """Record a pod's reservation (replacing an older one); True when the pod was new."""
        old = self._pods.pop(alloc.uid, None)
        if old is not None:
            self._apply(old, -1)
        self._pods[alloc.uid] = alloc
        self._apply(alloc, 1)
        return old is None

    def remove(self, uid: str) -> PodAllocation | None:
        old = self._pods.pop(uid, None)
        if old is not None:
            self._apply(old, -1)
        return old

    def get(self, uid: str) -> PodAllocation | None:
        return self._pods.get(uid)

    def pods(self) -> Iterator[PodAllocation]:
        return iter(self._pods.values())

    def node_usage(self, node: str) -> dict[str, tuple[int, int, int]]:
        """UUID -> (slots used, MiB used, cores used) on one node."""
        return {uuid: (u[0], u[1], u[2]) for uuid, u in self._nodes.get(node, {}).items()}

    def view(self, node: NodeState, without: PodAllocation | None = None) -> NodeView:
        """The node's view, cached until its usage or its ``NodeState`` object changes.

        ``without`` leaves one pod's reservation out (a re-filter of that pod); such views are
        built fresh and not cached.
        """
        if without is not None and without.node == node.name:
            usage = self._nodes.get(node.name, {})
            adjusted = {uuid: list(u) for uuid, u in usage.items()}
            for s in without.shares:
                u = adjusted.get(s.uuid)
                if u is not None:
                    u[0] -= max(s.slots, 1)
                    u[1] -= s.usedmem
                    u[2] -= s.usedcores
                    u[3] -= s.uuid in without.unreserved
            placements = self._placements.get(node.name)
            if placements is not None and without.mig:
                placements = {uuid: list(p) for uuid, p in placements.items()}
                for a in without.mig:
                    placements[a.gpu_uuid].remove(a.placement)
            return NodeView(node, adjusted, placements)
        cached = self._views.get(node.name)
        if cached is not None and cached.node is node:
            return cached
        fresh = NodeView(node, self._nodes.get(node.name), self._placements.get(node.name))
        self._views[node.name] = fresh
        return fresh

    @property
    def seq(self) -> int:
        """How many node usage changes there have been so far (see ``touched_since``)."""
        return self._touched_base + len(self._touched)

    def touched_since(self, seq: int) -> list[str] | None:
        """Nodes whose usage changed after change number ``seq``; None when that is forgotten."""
        start = seq - self._touched_base
        return self._touched[start:] if start >= 0 else None

    def views(self, nodes: Sequence[NodeState], without: PodAllocation | None = None) -> list[NodeView]:
        """``view`` for every node, in order; one call, so the filter's per-node loop stays lean."""
        cached = self._views
        skip = without.node if without is not None else None
        out: list[NodeView] = []
        for node in nodes:
            nv = cached.get(node.name)
            if nv is None or nv.node is not node or node.name == skip:
                nv = self.view(node, without)
            out.append(nv)
        return out

    def _apply(self, alloc: PodAllocation, sign: int) -> None:
        usage = self._nodes.setdefault(alloc.node, {})
        unreserved = alloc.unreserved
        for s in alloc.shares:
            u = usage.setdefault(s.uuid, [0, 0, 0, 0])
            u[0] += sign * max(s.slots, 1)
            u[1] += sign * s.usedmem
            u[2] += sign * s.usedcores
            if s.uuid in unreserved:
                u[3] += sign
            if u == [0, 0, 0, 0]:
                del usage[s.uuid]
        if not usage:
            del self._nodes[alloc.node]
        if alloc.mig:
            self._apply_mig(alloc, sign)
        self._views.pop(alloc.node, None)
        self._touched.append(alloc.node)
        if len(self._touched) > self._touch_log:
            drop = len(self._touched) // 2
            del self._touched[:drop]
            self._touched_base += drop

    def _apply_mig(self, alloc: PodAllocation, sign: int) -> None:
        placements = self._placements.setdefault(alloc.node, {})
        for a in alloc.mig:
            held = placements.setdefault(a.gpu_uuid, [])
            if sign > 0:
                held.append(a.placement)
            else:
                held.remove(a.placement)
                if not held:
                    del placements[a.gpu_uuid]
        if not placements:
            del self._placements[alloc.node]


def compute_usage(allocations: Iterable[PodAllocation]) -> UsageIndex:
    """A usage index over a set of pods (HAMi ``getNodesUsage`` for a snapshot)."""
    index = UsageIndex()
    for alloc in allocations:
        index.add(alloc)
    return index
