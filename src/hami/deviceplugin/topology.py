"""GPU pair scores for ``hami.io/node-nvidia-score`` (``ENABLE_TOPOLOGY_SCORE``), as HAMi computes them.

Each ordered pair (a, b) gets a list of links: the PCIe path's kind, from the closest common
ancestor NVML reports, and the NVLinks between them (direct links whose far end is b's bus; if there
are none but both GPUs hang off NVSwitches, the smaller of their switch-link counts). The score adds
10 (across CPU sockets), 20 (one NUMA node), 30 (one host bridge), 40 (several PCIe switches),
50 (one switch) or 60 (one board) for the PCIe path and 100 per NVLink. A pair whose two directions
do not list the same number of links scores 0 (HAMi's "P2PLinks mismatch"), and is reported so the
plugin can say so in a Node event. Pure: NVML facts in, scores out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hami.core.nvml import NvLinkRemote
from hami.core.nvml.api import (
    TOPOLOGY_HOSTBRIDGE,
    TOPOLOGY_INTERNAL,
    TOPOLOGY_MULTIPLE,
    TOPOLOGY_NODE,
    TOPOLOGY_SINGLE,
    TOPOLOGY_SYSTEM,
)
from hami.deviceplugin.inventory import pci_sysfs_id

P2P_SCORES: dict[int, int] = {
    TOPOLOGY_SYSTEM: 10,
    TOPOLOGY_NODE: 20,
    TOPOLOGY_HOSTBRIDGE: 30,
    TOPOLOGY_MULTIPLE: 40,
    TOPOLOGY_SINGLE: 50,
    TOPOLOGY_INTERNAL: 60,
}
NVLINK_SCORE = 100
MAX_NVLINKS = 18  # HAMi's link types stop at EighteenNVLINKLinks; more is not a known link


@dataclass(frozen=True)
class GpuLinks:
    """What NVML says about one GPU's connections: its bus id, its active NVLinks, and the PCIe
    common-ancestor level towards each peer (absent where NVML could not say)."""

    uuid: str
    bus_id: str
    nvlinks: tuple[NvLinkRemote, ...] = ()
    levels: Mapping[str, int] = field(default_factory=dict)


def _bus(bus_id: str) -> str:
    return pci_sysfs_id(bus_id)


def nvlink_count(a: GpuLinks, b: GpuLinks) -> int:
    """NVLinks from a to b: direct links to b's bus, else the NVSwitch links both have (the fewer)."""
    direct = sum(1 for r in a.nvlinks if not r.switch and _bus(r.bus_id) == _bus(b.bus_id))
    if direct:
        return direct if direct <= MAX_NVLINKS else 0
    via_a = sum(1 for r in a.nvlinks if r.switch)
    via_b = sum(1 for r in b.nvlinks if r.switch)
    if via_a and via_b:
        shared = min(via_a, via_b)
        return shared if shared <= MAX_NVLINKS else 0
    return 0


def links(a: GpuLinks, b: GpuLinks) -> list[int]:
    """The scores of the links a lists towards b: the PCIe path (if known), then the NVLinks."""
    out = []
    level = a.levels.get(b.uuid)
    if level in P2P_SCORES:
        out.append(P2P_SCORES[level])
    count = nvlink_count(a, b)
    if count:
        out.append(NVLINK_SCORE * count)
    return out


@dataclass(frozen=True)
class PairScores:
    scores: dict[str, dict[str, int]]  # uuid -> peer uuid -> score, in the GPUs' order
    asymmetric: tuple[tuple[str, str], ...]  # pairs whose directions disagree (scored 0)


def pair_scores(gpus: Sequence[GpuLinks]) -> PairScores:
    lists = {(a.uuid, b.uuid): links(a, b) for a in gpus for b in gpus if a.uuid != b.uuid}
    scores: dict[str, dict[str, int]] = {}
    asymmetric: list[tuple[str, str]] = []
    for a in gpus:
        row: dict[str, int] = {}
        for b in gpus:
            if a.uuid == b.uuid:
                continue
            mine, theirs = lists[(a.uuid, b.uuid)], lists[(b.uuid, a.uuid)]
            if len(mine) != len(theirs):
                row[b.uuid] = 0
                if a.uuid < b.uuid:
                    asymmetric.append((a.uuid, b.uuid))
                continue
            row[b.uuid] = sum(mine)
        scores[a.uuid] = row
    return PairScores(scores, tuple(asymmetric))
