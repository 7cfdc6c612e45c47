"""Node and GPU scores (§4.4 step 1, §4.8, docs/design/scheduler.md §9.2).

Section signs (§) refer to docs/design/scheduler-filter.md.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from hami.scheduler.engine.device_view import Dev
from hami.scheduler.engine.policy import Weights

_F32 = struct.Struct("f")


def f32(x: float) -> float:
    """``x`` rounded to float32. HAMi keeps scores in float32 and each Go float32 operation rounds
    its result: doing the same keeps node order and the event's ``%.2f`` labels identical to HAMi's
    where float64 would break near-ties the other way (7.625 here, 7.6250005 there: "7.62" vs "7.63").
    Rounding a float64 result of one +, -, * or / of float32 values gives float32's own result."""
    value: float = _F32.unpack(_F32.pack(x))[0]
    return value


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
    use, core, mem = f32(f32(used) / f32(count)), f32(f32(usedcores) / f32(totalcore)), f32(
        f32(usedmem) / f32(totalmem)
    )
    return f32(10.0 * f32(f32(use + core) + mem))


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
    ws, wc, wm = f32(weights.slot), f32(weights.core), f32(weights.memory)
    out = [0.0] * len(devs)
    for i in positions:
        d = devs[i]
        count, totalcore, totalmem = d.count, d.totalcore, d.totalmem
        if count and totalcore and totalmem:
            mem = totalmem * pct // 100 if pct else req_mem
            # in float32, operation by operation, as HAMi's ComputeScore
            slot = f32(ws * f32((1 + used[i]) / count))
            core = f32(wc * f32((req_cores + ucores[i]) / totalcore))
            memory = f32(wm * f32((mem + umem[i]) / totalmem))
            out[i] = f32(10.0 * f32(f32(slot + core) + memory))
    return out
