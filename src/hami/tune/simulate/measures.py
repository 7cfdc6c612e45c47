"""The figures a replay is judged by, and how far a replay reproduces the snapshot's placements.

- pods placed and still waiting at the end, and how long placed pods waited (from creation);
- GPU memory and cores allocated, time-averaged and at the peak, as shares of what the nodes
  register under the scenario (memory also against the cards' physical memory);
- fragmentation: the share of unallocated memory sitting on cards that cannot take the median
  request (no slot left, too little memory or cores): capacity that exists but serves nobody;
- over-commit headroom: the least physical memory left on any card once its allocations are
  counted (negative when deviceMemoryScaling promises more than the card has), and, when the
  snapshot knows each pod's peak use, the same if every holder peaked at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hami.core.snapshot import model as snap
from hami.tune.simulate.records import Placement, PodRun, ReplayResult, placement, recorded_placement


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0–100); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(math.ceil(q / 100 * len(ordered)), 1)
    return ordered[rank - 1]


@dataclass(frozen=True)
class Summary:
    scenario: str
    pods: int  # pods the scheduler had to place (not counting those placed outside it)
    placed: int
    waited: int  # placed after waiting
    pending_end: int  # still waiting when the history ends
    never_placed: int  # waited until deleted or until the end
    invalid: int  # pods the filter rejects outright
    wait_mean: float
    wait_p50: float
    wait_p95: float
    wait_max: float
    mem_mean: float  # ratio of registered memory
    mem_peak: float
    mem_physical_peak: float  # peak allocated / physical
    cores_mean: float
    cores_peak: float
    fragmentation_mean: float
    fragmentation_end: float
    headroom_mib: int
    overcommitted_cards: int  # at the worst sample
    peak_headroom_mib: int | None
    bind_failures: int
    locked_node_seconds: float
    cards: int
    registered_mib: int
    physical_mib: int
    typical_mib: int
    typical_cores: int


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def summarise(result: ReplayResult) -> Summary:
    runs = [run for run in result.runs if not run.fixed]
    placed = [run for run in runs if run.placed_at is not None]
    waits = [run.wait or 0.0 for run in placed]
    cap = result.capacity
    span = result.end - result.start
    samples = result.samples
    mem_peak = max((s.mem_mib for s in samples), default=0)
    frag = [_ratio(s.stranded_mib, s.free_mib) for s in samples]
    peaks = [s.peak_headroom_mib for s in samples if s.peak_headroom_mib is not None]
    return Summary(
        scenario=result.scenario.name,
        pods=len(runs),
        placed=len(placed),
        waited=sum(1 for w in waits if w > 0),
        pending_end=sum(
            1 for run in runs if run.placed_at is None and not run.error and run.pod.finished is None
        ),
        never_placed=sum(1 for run in runs if run.placed_at is None),
        invalid=sum(1 for run in runs if run.error),
        wait_mean=sum(waits) / len(waits) if waits else 0.0,
        wait_p50=percentile(waits, 50),
        wait_p95=percentile(waits, 95),
        wait_max=max(waits, default=0.0),
        mem_mean=_ratio(result.mem_area, span * cap.mem_mib) if span > 0 else _ratio(mem_peak, cap.mem_mib),
        mem_peak=_ratio(mem_peak, cap.mem_mib),
        mem_physical_peak=_ratio(mem_peak, cap.physical_mib),
        cores_mean=_ratio(result.core_area, span * cap.cores)
        if span > 0
        else _ratio(max((s.cores for s in samples), default=0), cap.cores),
        cores_peak=_ratio(max((s.cores for s in samples), default=0), cap.cores),
        fragmentation_mean=sum(frag) / len(frag) if frag else 0.0,
        fragmentation_end=frag[-1] if frag else 0.0,
        headroom_mib=min((s.headroom_mib for s in samples), default=0),
        overcommitted_cards=max((s.overcommitted for s in samples), default=0),
        peak_headroom_mib=min(peaks) if peaks else None,
        bind_failures=sum(run.bind_failures for run in runs),
        locked_node_seconds=result.locked_seconds,
        cards=cap.cards,
        registered_mib=cap.mem_mib,
        physical_mib=cap.physical_mib,
        typical_mib=result.typical[0],
        typical_cores=result.typical[1],
    )


# --- fidelity ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    pod: str
    real: Placement
    replayed: Placement
    tied: bool  # created in the same second as another pod: their order is not recorded


@dataclass(frozen=True)
class Fidelity:
    compared: int
    same: int
    differences: tuple[Difference, ...]
    # placed by the scheduler after a pod the snapshot lacks took cards (``Snapshot.gone_since``)
    not_compared: int = 0

    @property
    def agreement(self) -> float:
        return self.same / self.compared if self.compared else 1.0


def fidelity(result: ReplayResult) -> Fidelity:
    """Compare the replay with the snapshot for every pod the scheduler decided (placed or not)."""
    seconds: dict[int, int] = {}
    for run in result.runs:
        second = int(run.pod.created)
        seconds[second] = seconds.get(second, 0) + 1
    compared = same = unknown = 0
    diffs: list[Difference] = []
    gone = result.gone_since
    for run in result.runs:
        if run.fixed:
            continue
        if gone is not None and _decided_after(run.pod, math.floor(gone)):
            unknown += 1  # the cards then held are not all in the snapshot: no record to compare with
            continue
        compared += 1
        real, got = recorded_placement(run.pod), _replayed(run)
        if real == got:
            same += 1
        else:
            diffs.append(Difference(run.pod.key, real, got, seconds[int(run.pod.created)] > 1))
    return Fidelity(compared, same, tuple(diffs), unknown)


def _decided_after(pod: snap.Pod, t: float) -> bool:
    """Whether the scheduler's decision on ``pod`` (its placement, or its wait) reaches past ``t``."""
    if pod.scheduled is not None:
        return pod.scheduled >= t
    return pod.allocation is None and (pod.finished is None or pod.finished >= t)


def _replayed(run: PodRun) -> Placement:
    if run.placed_at is None:
        return None, ()
    return placement(run.node, run.devices)
