"""Node and GPU scores (§4.4 step 1, §4.8, §9.2).

Section signs (§) refer to docs/design/scheduler.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from hami.scheduler.engine.device_view import Dev
from hami.scheduler.engine.policy import Weights

# Per-device usage of one node: (slots used, MiB used, cores used), each indexed by position.
Load = tuple[Sequence[int], Sequence[int], Sequence[int]]


def node_score(
    *, used: int, count: int, usedcores: int, totalcore: int, usedmem: int, totalmem: int,
) -> float:
    """HAMi ``ComputeDefaultScore`` over a node's totals, from usage BEFORE the pod (§4.8).

    ``10 × (ΣUsed/ΣCount + ΣUsedcores/ΣTotalcore + ΣUsedmem/ΣTotalmem)``, 0 if a total is 0.
    """
    if count == 0 or totalcore == 0 or totalmem == 0:
        return 0.0
    return 10.0 * (used / count + usedcores / totalcore + usedmem / totalmem)


def device_scores(
    weights: Weights, devs: Sequence[Dev], positions: Sequence[int], load: Load,
    request: tuple[int, int, int],
) -> list[float]:
    """HAMi ``DeviceListsScore.ComputeScore`` per device, with the request added (quirk Q2 fixed).

    ``10 × (wSlot·(1+Used)/Count + wCore·(cores+Usedcores)/Totalcore + wMem·(mem+Usedmem)/Totalmem)``
    where mem is ``Totalmem·pct/100`` when a percentage is given, else the MiB request; 0 when a
    capacity is 0. ``request`` is (cores, MiB, percentage or 0). Binpack prefers high, spread low.
    """
    used, umem, ucores = load
    req_cores, req_mem, pct = request
    ws, wc, wm = 10.0 * weights.slot, 10.0 * weights.core, 10.0 * weights.memory
    out = [0.0] * len(devs)
    for i in positions:
        d = devs[i]
        count, totalcore, totalmem = d.count, d.totalcore, d.totalmem
        if count and totalcore and totalmem:
            mem = totalmem * pct // 100 if pct else req_mem
            out[i] = (ws * (1 + used[i]) / count + wc * (req_cores + ucores[i]) / totalcore
                      + wm * (mem + umem[i]) / totalmem)
    return out
