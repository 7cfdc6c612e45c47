"""What a replay records: pod runs, samples, capacity, the result, event kinds and placements."""

from __future__ import annotations

from dataclasses import dataclass, field

from hami.core.devices import PodDevices
from hami.core.snapshot import model as snap
from hami.scheduler.engine.decision import FilterResult
from hami.scheduler.engine.requests import PodRequest
from hami.tune.simulate import cluster as cl
from hami.tune.simulate.scenario import Scenario

# Event kinds, in the order they run at one instant: capacity frees up before pods arrive.
DEPART, GIVE_UP, ARRIVE, RETRY = 0, 1, 2, 3
SAMPLES = 120
Placement = tuple[str | None, tuple[tuple[str, ...], ...]]


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
    gone_since: float | None = None  # the snapshot's: placements from then on are not compared


def arrival_order(pod: snap.Pod) -> tuple[float, bool, float, str, str]:
    """How the replay orders pods: by creation, and within a second by the scheduler's first
    decision where the snapshot knows it (its events), before those whose order is unknown."""
    attempt = pod.first_attempt
    return pod.created, attempt is None, attempt or 0.0, pod.namespace, pod.name


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
