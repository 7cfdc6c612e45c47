"""A scheduling snapshot from Prometheus history (``hami-doctor snapshot --from-prometheus``).

The API server forgets deleted pods; the scheduler extender's metrics remember them for the
retention period. From the extender's per-device series the history rebuilds every node's
registered cards (``hami_gpu_split_limit``, ``hami_gpu_memory_limit_bytes``,
``hami_gpu_core_limit_ratio``) and every pod that held a GPU (``hami_vgpu_memory_allocated_bytes``
and ``hami_vgpu_core_allocated_ratio``, one series per pod and card while the pod holds it), with
the device plugin's ``hami_device_memory_scaling`` and ``hami_device_memory_enforcement`` (a node
whose cards the driver limits registers them so, for pods that ask for it) and the monitor's peak
``hami_vgpu_memory_used_bytes``. ``hami_scheduler_node_lock_held`` gives the locks that stayed
held across samples, the device plugin's ``hami_device_health`` when each card was unhealthy, and
``hami_scheduler_node_schedulable`` when a node's handshake had expired (the snapshot's outages).

What metrics cannot say, the snapshot's notes say: times have the resolution of the step, a pod
appears when it was placed (so it never waited), its request is rebuilt from what it was given,
NUMA and MIG are not exported, and pods that never got a GPU are not in this history.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from hami.core import annotations as ann
from hami.core.codec.node_devices import encode_node_devices
from hami.core.codec.pod_devices import encode_pod_devices
from hami.core.devices import ENFORCE_DRIVER, MODE_HAMI_CORE, ContainerDevice, DeviceInfo
from hami.core.promapi import Sample, Series
from hami.core.snapshot import model as snap
from hami.doctor.capture import NOTE_LOCK, NOTE_SCALING, CaptureSettings

MIB = 1 << 20
POD_KEY = ("namespace", "pod", "node", "device_uuid")

NOTES = (
    "rebuilt from Prometheus: times have the resolution of the step; a pod shows up once placed, so "
    "its waiting time is unknown (0); its request is rebuilt from the memory and cores it was given "
    "(percentage requests become MiB); pods that never got a GPU are not in the history",
    "rebuilt from Prometheus: NUMA nodes, MIG, pair scores, cordons and ResourceQuotas are not "
    "exported, so every card is taken as NUMA 0 in hami-core mode and no quota applies",
)


@dataclass(frozen=True)
class HistorySettings:
    end: float  # unix seconds
    since: float  # seconds of history
    step: float  # seconds between samples
    capture: CaptureSettings

    @property
    def start(self) -> float:
        return self.end - self.since

    @property
    def fresh(self) -> float:
        """How old a sample may be and still count as present: one step, which is at least the
        scrape interval (so an end is known to within a step)."""
        return self.step

    @property
    def window(self) -> str:
        return f"{int(self.since)}s"


class Source(Protocol):
    """The two query kinds the history needs (``PrometheusClient`` has both)."""

    def query(self, expr: str) -> list[Sample]: ...

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]: ...


def _labels(s: Sample | Series, *keys: str) -> tuple[str, ...]:
    return tuple(s.labels.get(k, "") for k in keys)


def _fresh(metric: str, by: str, h: HistorySettings) -> str:
    """The series only where a sample is recent: without this, a series that ended lingers for
    Prometheus' 5 minute lookback where no staleness marker ended it (backfilled or federated data)."""
    return f"max by ({by}) ({metric} and (time() - timestamp({metric}) < {h.fresh:g}))"


def _devices(source: Source, h: HistorySettings) -> dict[str, list[DeviceInfo]]:
    w = h.window
    by = "node, device_uuid, device_index, device_type"

    def last(metric: str) -> dict[tuple[str, ...], float]:
        expr = f"max by ({by}) (last_over_time({metric}[{w}]))"
        return {
            _labels(s, "node", "device_uuid", "device_index", "device_type"): s.value
            for s in source.query(expr)
        }

    memory = last("hami_gpu_memory_limit_bytes")
    split = last("hami_gpu_split_limit")
    cores = last("hami_gpu_core_limit_ratio")
    health = {
        _labels(s, "node", "device_uuid"): s.value
        for s in source.query(f"min by (node, device_uuid) (last_over_time(hami_device_health[{w}]))")
    }
    # the nodes whose device plugin ran --memory-enforcement driver (the scheduler fits by it)
    enforced = f'hami_device_memory_enforcement{{enforcement="{ENFORCE_DRIVER}"}}'
    driver = {
        s.labels.get("node", "")
        for s in source.query(f"max by (node) (last_over_time({enforced}[{w}])) == 1")
    }
    nodes: dict[str, list[DeviceInfo]] = defaultdict(list)
    for key in sorted(memory, key=lambda k: (k[0], int(k[2]) if k[2].isdigit() else 0, k[1])):
        node, uuid, index, model = key
        nodes[node].append(
            DeviceInfo(
                id=uuid,
                index=int(index) if index.isdigit() else 0,
                count=int(split.get(key, 10)),
                devmem=int(memory[key] // MIB),
                devcore=int(cores.get(key, 100)),
                type=model,
                numa=0,
                mode=MODE_HAMI_CORE,
                health=health.get((node, uuid), 1.0) > 0,
                device_vendor=ann.VENDOR_NVIDIA,
                enforcement=ENFORCE_DRIVER if node in driver else "",
            )
        )
    return dict(nodes)


def _per_node(source: Source, metric: str, h: HistorySettings) -> dict[str, float]:
    return {
        s.labels.get("node", ""): s.value
        for s in source.query(f"max by (node) (last_over_time({metric}[{h.window}]))")
    }


def _runs(points: tuple[tuple[float, float], ...], step: float) -> list[tuple[float, float, float]]:
    """(first, last, value at last) of each run of points no more than 2.5 steps apart."""
    runs: list[tuple[float, float, float]] = []
    first = prev = None
    value = 0.0
    for t, v in points:
        if prev is not None and t - prev > 2.5 * step:
            assert first is not None
            runs.append((first, prev, value))
            first = None
        if first is None:
            first = t
        prev, value = t, v
    if first is not None and prev is not None:
        runs.append((first, prev, value))
    return runs


@dataclass
class _Instance:
    namespace: str
    pod: str
    node: str
    first: float
    last: float
    cards: dict[str, tuple[int, int]]  # uuid -> (MiB, cores)


def _instances(source: Source, h: HistorySettings) -> list[_Instance]:
    by = ", ".join(POD_KEY)
    memory = source.query_range(_fresh("hami_vgpu_memory_allocated_bytes", by, h), h.start, h.end, h.step)
    cores = {
        _labels(s, *POD_KEY): s.points
        for s in source.query_range(_fresh("hami_vgpu_core_allocated_ratio", by, h), h.start, h.end, h.step)
    }
    found: dict[tuple[str, str, str, float], _Instance] = {}
    for series in memory:
        ns, pod, node, uuid = _labels(series, *POD_KEY)
        core_points = dict(cores.get((ns, pod, node, uuid), ()))
        for first, last, value in _runs(series.points, h.step):
            # Cards of one pod appear in the same sample; the first sample names the instance.
            key = (ns, pod, node, first)
            inst = found.setdefault(key, _Instance(ns, pod, node, first, last, {}))
            inst.last = max(inst.last, last)
            inst.cards[uuid] = (int(value // MIB), int(core_points.get(last, 0)))
    return sorted(found.values(), key=lambda i: (i.first, i.namespace, i.pod))


def scrape_interval(source: Source, since: float, end: float) -> float:
    """Seconds between the extender's samples, from how many the last minutes hold (60 when unknown:
    no sample of it in the window)."""
    window = int(min(since, 300))
    expr = f"max(count_over_time(hami_scheduler_nodes[{window}s] @ {end:.3f}))"
    got = source.query(expr)
    if not got or got[0].value < 2:  # two samples make one interval
        return 60.0
    return float(math.ceil(window / got[0].value))


def _begin(source: Source, h: HistorySettings) -> float:
    """When the history begins: the window's start, or the extender's first sample in it if later
    (a cluster younger than --since)."""
    expr = f"min(min_over_time(timestamp(hami_gpu_memory_limit_bytes)[{h.window}:{max(int(h.step), 1)}s]))"
    first = source.query(expr)
    return max(h.start, first[0].value) if first else h.start


def _pod(
    inst: _Instance,
    n: int,
    h: HistorySettings,
    peak: dict[tuple[str, ...], float],
    *,
    live: snap.Pod | None,
    begin: float,
) -> snap.Pod:
    # One container per distinct (MiB, cores) share: a pod's containers ask the same of each card.
    groups: dict[tuple[int, int], list[str]] = defaultdict(list)
    for uuid, share in sorted(inst.cards.items()):
        groups[share].append(uuid)
    cfg = h.capture.scheduler.device_config
    names = (
        str(cfg.get("resourceCountName") or ann.RESOURCE_GPU),
        str(cfg.get("resourceMemoryName") or ann.RESOURCE_GPUMEM),
        str(cfg.get("resourceCoreName") or ann.RESOURCE_GPUCORES),
    )
    containers: list[snap.Container] = []
    devices: list[list[ContainerDevice]] = []
    for i, ((mib, core), uuids) in enumerate(sorted(groups.items())):
        limits = {names[0]: str(len(uuids)), names[1]: str(mib), names[2]: str(core)}
        containers.append(snap.Container(f"c{i}", {"limits": limits}))
        devices.append([ContainerDevice(u, ann.VENDOR_NVIDIA, mib, core) for u in uuids])
    ongoing = inst.last >= h.end - 2.5 * h.step
    # Placed before the history begins, or (the API says) outside the scheduler: its placement is
    # not one to replay, and it holds its cards as recorded.
    fixed = inst.first <= begin + 1.5 * h.step or (
        live is not None and live.allocation is not None and live.scheduled is None
    )
    first = min(inst.first, h.end)  # a last sample stamped a hair after the end is at the end
    same = live is not None and ongoing and live.allocation is not None and live.allocation.node == inst.node
    return snap.Pod(
        namespace=inst.namespace,
        name=inst.pod,
        uid=f"prometheus-{n}",
        created=first,
        # the API's copy of a pod still running has what Prometheus lacks: the true requests and the
        # annotations that steer the filter (GPU type and UUID, NUMA, policies)
        annotations=live.annotations if same and live is not None else {},
        init_containers=live.init_containers if same and live is not None else (),
        containers=live.containers if same and live is not None else tuple(containers),
        scheduled=None if fixed else first,
        finished=None if ongoing else inst.last + h.step,
        allocation=snap.Allocation(inst.node, encode_pod_devices(devices)),
        peak_memory_bytes=peak.get((inst.namespace, inst.pod)),
        # the API's first filter, when it is this instance's (within the sample it was first seen in)
        first_attempt=live.first_attempt
        if same and live is not None and live.first_attempt is not None
        and first - 2 * h.step <= live.first_attempt <= first
        else None,
    )


def _split_at_binds(locks: list[snap.Lock], pods: tuple[snap.Pod, ...], step: float) -> list[snap.Lock]:
    """A bind takes the node lock, so a lock seen held across a pod's recorded bind was free or
    expired then: it ends at the bind, and the bind's own lock holds from the next step on (the
    held gauge cannot tell one holder from the next)."""
    binds: dict[str, list[float]] = defaultdict(list)
    for p in pods:
        if p.scheduled is not None and p.allocation is not None:
            binds[p.allocation.node].append(p.scheduled)
    out: list[snap.Lock] = []
    for lock in locks:
        since = lock.since
        for t in sorted(binds.get(lock.node, ())):
            if since < t and (lock.released is None or t < lock.released):
                out.append(snap.Lock(lock.node, since, lock.owner, t))
                since = t + step
        if lock.released is None or since < lock.released:
            out.append(snap.Lock(lock.node, since, lock.owner, lock.released))
    return out


def _locks(source: Source, h: HistorySettings) -> list[snap.Lock]:
    locks: list[snap.Lock] = []
    held_series = source.query_range(
        _fresh("hami_scheduler_node_lock_held", "node", h), h.start, h.end, h.step
    )
    for series in held_series:
        held = tuple(p for p in series.points if p[1] >= 1)
        for first, last, _ in _runs(held, h.step):
            if last > first:  # held across samples: longer than a bind takes
                ongoing = last >= h.end - 2.5 * h.step
                locks.append(
                    snap.Lock(series.labels.get("node", ""), first, "", None if ongoing else last + h.step)
                )
    return locks


# Why the scheduler could not use a whole node (hami_scheduler_node_schedulable's reasons; a lock is
# in ``locks``, a card's health in the device plugin's hami_device_health).
NODE_OUT = "handshake_expired|decode_error|no_devices"


def _spans(series: list[Series], h: HistorySettings) -> list[tuple[Series, float, float | None]]:
    """(series, since, until) of each run of 0 samples (until None: still 0 at the end)."""
    out: list[tuple[Series, float, float | None]] = []
    for one in series:
        zero = tuple(p for p in one.points if p[1] == 0)
        for first, last, _ in _runs(zero, h.step):
            out.append((one, first, None if last >= h.end - 2.5 * h.step else last + h.step))
    return out


def _outages(source: Source, h: HistorySettings) -> list[snap.Outage]:
    """Cards the device plugin reported unhealthy, and nodes the scheduler could not use, over time."""
    cards = source.query_range(_fresh("hami_device_health", "node, device_uuid", h), h.start, h.end, h.step)
    metric = f'hami_scheduler_node_schedulable{{reason=~"{NODE_OUT}"}}'
    nodes = source.query_range(_fresh(metric, "node, reason", h), h.start, h.end, h.step)
    out = [
        snap.Outage(one.labels.get("node", ""), since, until, one.labels.get("device_uuid", ""), "unhealthy")
        for one, since, until in _spans(cards, h)
    ]
    out += [
        snap.Outage(one.labels.get("node", ""), since, until, "", one.labels.get("reason", ""))
        for one, since, until in _spans(nodes, h)
    ]
    return out


def from_prometheus(
    source: Source, h: HistorySettings, live: Mapping[str, snap.Pod] | None = None
) -> snap.Snapshot:
    """The snapshot of the history; ``live``: the API's pods by ``namespace/name``, when it was read."""
    devices = _devices(source, h)
    scaling = _per_node(source, "hami_device_memory_scaling", h)
    core_scaling = _per_node(source, "hami_device_core_scaling", h)
    c = h.capture
    nodes = tuple(
        snap.Node(
            name=name,
            annotations={ann.NODE_REGISTER: encode_node_devices(devs)},
            allocatable_gpus=sum(d.count for d in devs),
            memory_scaling=c.node_memory_scaling.get(name, scaling.get(name, c.memory_scaling)),
            core_scaling=core_scaling.get(name, c.core_scaling),
        )
        for name, devs in sorted(devices.items())
    )
    known = {n.name for n in nodes}
    peak: dict[tuple[str, ...], float] = {
        _labels(s, "namespace", "pod"): s.value
        for s in source.query(
            f"max by (namespace, pod) (max_over_time(hami_vgpu_memory_used_bytes[{h.window}]))"
        )
    }
    instances = [i for i in _instances(source, h) if i.node in known]
    live = live or {}
    begin = _begin(source, h)
    pods = tuple(
        _pod(inst, n, h, peak, live=live.get(f"{inst.namespace}/{inst.pod}"), begin=begin)
        for n, inst in enumerate(instances)
    )
    notes = dict(c.notes)
    scheduler = c.scheduler
    lock = source.query(f"max(last_over_time(hami_scheduler_node_lock_timeout_seconds[{h.window}]))")
    if lock and lock[0].value > 0 and NOTE_LOCK in notes:
        scheduler = snap.Scheduler(
            scheduler.scheduler_name,
            scheduler.node_policy,
            scheduler.gpu_policy,
            lock[0].value,
            scheduler.device_config,
        )
        del notes[NOTE_LOCK]
    if scaling:
        notes.pop(NOTE_SCALING, None)
    return snap.Snapshot(
        source=snap.SOURCE_PROMETHEUS,
        taken=h.end,
        start=h.start,
        scheduler=scheduler,
        nodes=nodes,
        pods=pods,
        locks=tuple(_split_at_binds(_locks(source, h), pods, h.step)),
        outages=tuple(o for o in _outages(source, h) if o.node in known),
        notes=(*NOTES, *notes.values()),
    )
