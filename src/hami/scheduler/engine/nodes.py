"""Nodes as the fit sees them: registered devices plus current usage, flattened once per change.

A ``NodeView`` is built from a ``NodeState`` and the node's usage and then reused by every filter
call until either changes (``UsageIndex.view`` caches it), so the per-call hot path only reads
flat per-device fields and the precomputed node score.

§6.2 for MIG: a ``mig`` card carries the placements reserved on it and is out of service
(unhealthy) while a pod holds it without a reservation (its placement is unknown); a
``hami-core`` card that has a MIG reservation is out of service too (the two disagree).

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hami.core import annotations as ann
from hami.core.codec.cordon import parse_cordon
from hami.core.codec.errors import CodecError
from hami.core.codec.node_devices import ANNOS_NOT_FOUND, NO_GPU_FOUND, get_node_devices
from hami.core.devices import DeviceInfo, MigPlacement
from hami.scheduler.engine.device_view import Dev
from hami.scheduler.engine.score import node_score


@dataclass(frozen=True, eq=False)
class NodeState:
    """A registered node: its NVIDIA devices (``hami.io/node-nvidia-register``) and cordoned UUIDs."""

    name: str
    devices: tuple[DeviceInfo, ...]
    cordoned: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Unregistered:
    """Why a node's annotations give the filter no node.

    ``reason`` is the decoder's message. ``source`` names the annotation that failed to decode
    (``node_register`` or ``node_pair_score``, the ``decode_errors`` label); it is empty when the
    node simply registers no device (no register annotation, or an empty device list).
    """

    reason: str
    source: str = ""


def node_state(name: str, annotations: Mapping[str, str]) -> NodeState | Unregistered:
    """The node as the filter sees it, from its annotations alone (HAMi ``GetNodeDevices`` plus
    the cordon list): the register loop and the dry run both decode nodes here.

    A cordon list cannot fail to decode (any string is a list of UUIDs, empty items skipped).
    """
    try:
        devices = get_node_devices(annotations, annotations.get(ann.NODE_PAIR_SCORE))
    except CodecError as err:
        if err.what in (ANNOS_NOT_FOUND, NO_GPU_FOUND):
            return Unregistered(str(err))
        source = "node_pair_score" if ann.NODE_PAIR_SCORE in str(err.where) else "node_register"
        return Unregistered(str(err), source)
    return NodeState(name, tuple(devices), parse_cordon(annotations.get(ann.NODE_DEVICE_CORDON)))


class NodeView:
    """Devices and usage of one node; the usage tuples are never mutated (Fit copies them)."""

    __slots__ = (
        "any_mig", "avail", "devs", "indexes", "label", "memo", "name", "node", "numas", "nvidia", "score",
        "ucores", "umem", "used",
    )

    def __init__(
        self,
        node: NodeState,
        usage: Mapping[str, Sequence[int]] | None,
        placements: Mapping[str, Sequence[MigPlacement]] | None = None,
    ) -> None:
        self.node = node
        self.name = node.name
        self.devs = tuple(Dev(d, d.id in node.cordoned) for d in node.devices)
        # HAMi hands Fit only the devices whose model names the vendor ("nvidia", case-insensitive).
        self.nvidia = tuple(i for i, d in enumerate(self.devs) if "nvidia" in d.type.lower())
        self.numas = tuple(d.numa for d in self.devs)
        self.indexes = tuple(d.index for d in self.devs)
        self.any_mig = any(self.devs[i].mig for i in self.nvidia)
        zero = (0, 0, 0, 0)
        per_dev = [(usage.get(d.id, zero) if usage else zero) for d in self.devs]
        if self.any_mig or placements:
            _mig_health(self.devs, per_dev, placements or {})
        self.used = tuple(u[0] for u in per_dev)
        self.umem = tuple(u[1] for u in per_dev)
        self.ucores = tuple(u[2] for u in per_dev)
        # Cards that pass Fit's request-independent checks (health, cordon, split count); MIG cards
        # need a placement, so the quick scan leaves them to the full Fit.
        self.avail = tuple(
            i for i in self.nvidia
            if self.devs[i].health and not self.devs[i].cordoned and not self.devs[i].mig
            and self.used[i] < self.devs[i].count
        )
        # Verdicts per request shape; lives exactly as long as this view (i.e. until usage changes).
        self.memo: dict[str, bool | str] = {}
        self.score = node_score(
            used=sum(self.used), count=sum(d.count for d in self.devs),
            usedcores=sum(self.ucores), totalcore=sum(d.totalcore for d in self.devs),
            usedmem=sum(self.umem), totalmem=sum(d.totalmem for d in self.devs),
        )
        # "<node>:<score>" as the FilteringSucceed event lists it, formatted once per view.
        self.label = f"{self.name}:{self.score:.2f}"


def _mig_health(
    devs: Sequence[Dev], per_dev: Sequence[Sequence[int]], placements: Mapping[str, Sequence[MigPlacement]],
) -> None:
    """Attach reserved placements to ``mig`` cards and take inconsistent cards out of service."""
    for d, u in zip(devs, per_dev, strict=True):
        held = placements.get(d.id, ())
        if d.mig:
            d.occupied = tuple(held)
            if u[3]:
                d.health = False
        elif held:
            d.health = False
