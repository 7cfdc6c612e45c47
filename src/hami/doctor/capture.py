"""A scheduling snapshot from the API's objects (``hami-doctor snapshot``), as a pure function.

Nodes keep the annotations scheduling reads, verbatim, and whether the scheduler could use them at
the time of the snapshot (handshake, decodable devices). GPU pods (those for HAMi's scheduler, or
that HAMi placed) keep their containers' resources, the annotations that steer the filter, their
allocation and their times: created, scheduled (``hami.io/vgpu-time``), finished (the last
container's ``finishedAt`` once the pod has Succeeded or Failed). Pods deleted before the snapshot
are gone from the API; ``--from-prometheus`` recovers them from metric history.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, tzinfo
from typing import Any

from hami.core import annotations as ann
from hami.core.codec import CodecError
from hami.core.codec.handshake import check_handshake
from hami.core.codec.node_devices import decode_node_devices, get_node_devices
from hami.core.codec.nodelock import parse_node_lock, parse_rfc3339
from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.codec.quantity import parse_quantity
from hami.core.objects import annotations_of, metadata_of, name_of, namespace_of, uid_of
from hami.core.snapshot import model as snap
from hami.doctor.snapshot_events import first_attempts, gone_since, oldest

Obj = dict[str, Any]

# deviceConfig keys the scheduler reads (the ``nvidia:`` section of HAMi's device config).
SCHEDULER_CONFIG_KEYS = (
    "resourceCountName",
    "resourceMemoryName",
    "resourceMemoryPercentageName",
    "resourceCoreName",
    "defaultMemory",
    "defaultCores",
    "defaultGPUNum",
    "memoryFactor",
)
# Scheduler flags a snapshot records, read from the scheduler pods' arguments when not given.
POLICY_FLAGS = ("--node-scheduler-policy", "--gpu-scheduler-policy", "--node-lock-timeout")


@dataclass(frozen=True)
class CaptureSettings:
    scheduler: snap.Scheduler = field(default_factory=snap.Scheduler)
    memory_scaling: float = 1.0  # deviceMemoryScaling of nodes not in ``node_memory_scaling``
    node_memory_scaling: Mapping[str, float] = field(default_factory=dict)
    core_scaling: float = 1.0
    handshake_tz: tzinfo | None = None  # zone of the scheduler's handshake times (None = local)
    # Assumptions by topic (NOTE_*); a source that knows better drops its topic.
    notes: Mapping[str, str] = field(default_factory=dict)


NOTE_NODE_POLICY, NOTE_GPU_POLICY, NOTE_LOCK, NOTE_SCALING = "node_policy", "gpu_policy", "lock", "scaling"


def _time(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return parse_rfc3339(text, "time").timestamp()
    except CodecError:
        return None


def _allocatable(node: Mapping[str, Any], resource: str) -> int:
    status = node.get("status")
    alloc = status.get("allocatable") if isinstance(status, Mapping) else None
    value = alloc.get(resource) if isinstance(alloc, Mapping) else None
    try:
        amount = parse_quantity(str(value)) if value is not None else None
    except CodecError:
        return 0
    return int(amount) if amount is not None and amount >= 0 else 0


def capture_node(node: Mapping[str, Any], taken: datetime, s: CaptureSettings) -> snap.Node | None:
    """The node's snapshot entry; None for a node that never registered a device."""
    annos = annotations_of(node)
    if ann.NODE_REGISTER not in annos:
        return None
    name = name_of(node)
    kept: dict[str, str] = {k: annos[k] for k in snap.NODE_ANNOTATIONS if k in annos}
    resource = str(s.scheduler.device_config.get("resourceCountName") or ann.RESOURCE_GPU)
    allocatable = _allocatable(node, resource)
    schedulable, reason = True, ""
    healthy, _ = check_handshake(annos.get(ann.NODE_HANDSHAKE), taken, allocatable, s.handshake_tz)
    if not healthy:
        handshake = annos.get(ann.NODE_HANDSHAKE)
        schedulable, reason = False, f"handshake expired ({handshake!r}) and no {resource} allocatable"
    else:
        try:
            get_node_devices(annos, annos.get(ann.NODE_PAIR_SCORE))
        except CodecError as err:
            schedulable, reason = False, f"devices not usable: {err}"
    return snap.Node(
        name=name,
        annotations=kept,
        allocatable_gpus=allocatable,
        schedulable=schedulable,
        reason=reason,
        memory_scaling=s.node_memory_scaling.get(name, s.memory_scaling),
        core_scaling=s.core_scaling,
    )


def _resource_names(s: CaptureSettings) -> frozenset[str]:
    cfg = s.scheduler.device_config
    return frozenset(
        str(cfg.get(key) or default)
        for key, default in (
            ("resourceCountName", ann.RESOURCE_GPU),
            ("resourceMemoryName", ann.RESOURCE_GPUMEM),
            ("resourceMemoryPercentageName", ann.RESOURCE_GPUMEM_PERCENTAGE),
            ("resourceCoreName", ann.RESOURCE_GPUCORES),
        )
    )


def _containers(spec: Mapping[str, Any], key: str) -> tuple[snap.Container, ...]:
    items = spec.get(key)
    out: list[snap.Container] = []
    for c in items if isinstance(items, list) else []:
        if not isinstance(c, Mapping):
            continue
        res = c.get("resources")
        resources: dict[str, dict[str, str]] = {}
        for section in ("limits", "requests"):
            values = res.get(section) if isinstance(res, Mapping) else None
            if isinstance(values, Mapping):
                resources[section] = {str(k): str(v) for k, v in values.items() if isinstance(v, str | int)}
        out.append(snap.Container(str(c.get("name", "")), resources))
    return tuple(out)


def _asks_for_gpu(containers: Iterable[snap.Container], names: frozenset[str]) -> bool:
    return any(names & set(values) for c in containers for values in c.resources.values())


def _finished(pod: Mapping[str, Any]) -> float | None:
    """When a Succeeded/Failed pod stopped: its last container's finishedAt."""
    status = pod.get("status")
    if not isinstance(status, Mapping) or status.get("phase") not in ("Succeeded", "Failed"):
        return None
    times: list[float] = []
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or []:
            term = ((cs or {}).get("state") or {}).get("terminated") if isinstance(cs, Mapping) else None
            when = _time(term.get("finishedAt")) if isinstance(term, Mapping) else None
            if when is not None:
                times.append(when)
    if times:
        return max(times)
    conditions = status.get("conditions")
    transitions = [_time(c.get("lastTransitionTime")) for c in conditions or [] if isinstance(c, Mapping)]
    known = [t for t in transitions if t is not None]
    return max(known) if known else None


def capture_pod(pod: Mapping[str, Any], s: CaptureSettings) -> snap.Pod | None:
    """The pod's snapshot entry; None when it is no GPU pod of this scheduler."""
    meta = metadata_of(pod)
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return None
    annos = annotations_of(pod)
    init, regular = _containers(spec, "initContainers"), _containers(spec, "containers")
    node = annos.get(ann.POD_VGPU_NODE)
    devices = annos.get(ann.POD_DEVICES_ALLOCATED)
    allocation = None
    if node and devices is not None:
        allocation = snap.Allocation(node, devices, annos.get(ann.POD_MIG_ALLOCATIONS, ""))
    ours = spec.get("schedulerName") == s.scheduler.scheduler_name
    wanted = allocation is not None or (ours and _asks_for_gpu((*init, *regular), _resource_names(s)))
    if not regular or not wanted:
        return None
    created = _time(meta.get("creationTimestamp"))
    uid = uid_of(pod)
    if created is None or not uid:
        return None
    scheduled: float | None = None
    raw = annos.get(ann.POD_VGPU_TIME)
    if allocation is not None and raw is not None and raw.strip().isdigit():
        scheduled = max(float(raw), created)
    finished = _finished(pod)
    if finished is not None:
        finished = max(finished, created)
    return snap.Pod(
        namespace=namespace_of(pod),
        name=name_of(pod),
        uid=uid,
        created=created,
        annotations={k: annos[k] for k in snap.POD_ANNOTATIONS if k in annos},
        init_containers=init,
        containers=regular,
        scheduled=scheduled,
        finished=finished,
        allocation=allocation,
    )


def capture_quota(quota: Mapping[str, Any], s: CaptureSettings) -> snap.Quota | None:
    """A ResourceQuota with a HAMi limit (``limits.<memory or core resource>``)."""
    spec = quota.get("spec")
    hard = spec.get("hard") if isinstance(spec, Mapping) else None
    if not isinstance(hard, Mapping):
        return None
    names = {f"limits.{n}" for n in _resource_names(s)}
    kept = {str(k): str(v) for k, v in hard.items() if k in names and isinstance(v, str | int)}
    if not kept:
        return None
    return snap.Quota(namespace_of(quota), name_of(quota), kept)


def capture_lock(node: snap.Node) -> snap.Lock | None:
    value = node.annotations.get(ann.NODE_LOCK)
    if value is None:
        return None
    try:
        lock = parse_node_lock(value)
    except CodecError:
        return None
    owner = f"{lock.namespace}/{lock.name}" if lock.name else ""
    return snap.Lock(node.name, lock.time.timestamp(), owner)


def unhealthy_outages(
    nodes: Sequence[snap.Node], pods: Sequence[snap.Pod], start: float
) -> list[snap.Outage]:
    """The API keeps no health history, but the scheduler placed no pod on an unhealthy card: a card
    unhealthy now was healthy at the last placement it took, and is taken out from the next second
    on (from the start of the history when it took none)."""
    last: dict[tuple[str, str], float] = {}
    for p in pods:
        if p.scheduled is None or p.allocation is None:
            continue
        try:
            devices = decode_pod_devices(p.allocation.devices)
        except CodecError:
            continue
        for ctr in devices:
            for given in ctr:
                key = (p.allocation.node, given.uuid)
                last[key] = max(last.get(key, p.scheduled), p.scheduled)
    out: list[snap.Outage] = []
    for n in nodes:
        try:
            cards = decode_node_devices(n.annotations[ann.NODE_REGISTER])
        except CodecError:
            continue
        for card in cards:
            if not card.health:
                since = last[n.name, card.id] + 1 if (n.name, card.id) in last else start
                out.append(snap.Outage(n.name, since, None, card.id, "unhealthy"))
    return out


def capture(
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    quotas: Sequence[Mapping[str, Any]],
    taken: datetime,
    s: CaptureSettings,
    *,
    events: Iterable[Any] = (),
) -> snap.Snapshot:
    """The snapshot of a cluster as listed at ``taken``; nodes in the order given (the API's).
    ``events``: the pods' events, for when the scheduler first decided on each pod."""
    snodes = [n for n in (capture_node(node, taken, s) for node in nodes) if n is not None]
    names = {n.name for n in snodes}
    decisions = list(events)
    attempts = first_attempts(decisions)
    spods = sorted(
        (_attempted(p, attempts) for p in (capture_pod(pod, s) for pod in pods) if p is not None),
        key=lambda p: (p.created, p.namespace, p.name),
    )
    # A pod placed on a node that is gone keeps its request but loses its placement.
    spods = [p if p.allocation is None or p.allocation.node in names else _unplaced(p) for p in spods]
    squotas = [q for q in (capture_quota(quota, s) for quota in quotas) if q is not None]
    locks = [lk for lk in (capture_lock(n) for n in snodes) if lk is not None]
    t = taken.timestamp()
    start = min((p.created for p in spods), default=t)
    notes = list(s.notes.values())
    gone, count = gone_since(decisions, {uid_of(pod) for pod in pods})
    if gone is not None:
        notes.append(
            f"{count} GPU pod(s) placed since {_clock(gone)} were deleted before the snapshot (their events "
            "say so): which cards they held, and until when, the API no longer shows, so pods placed "
            "after that are replayed but not compared (--from-prometheus keeps deleted pods)"
        )
    horizon = oldest(decisions)  # whole seconds below: ``scheduled`` is
    horizon = None if horizon is None else float(math.floor(horizon))
    early = sum(1 for p in spods if horizon is not None and p.scheduled is not None and p.scheduled < horizon)
    if horizon is not None and early:
        notes.append(
            f"the pods' events reach back only to {_clock(horizon)} (the API server keeps them an hour by "
            f"default): a GPU pod deleted before then is not known, and the {early} placement(s) made "
            "before then are compared as if none was"
        )
    return snap.Snapshot(
        source=snap.SOURCE_API,
        taken=t,
        start=min(start, t),
        scheduler=s.scheduler,
        nodes=tuple(snodes),
        pods=tuple(spods),
        quotas=tuple(squotas),
        locks=tuple(locks),
        notes=tuple(notes),
        outages=tuple(unhealthy_outages(snodes, spods, min(start, t))),
        gone_since=gone,
    )


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _attempted(p: snap.Pod, attempts: Mapping[str, float]) -> snap.Pod:
    t = attempts.get(p.uid)
    # a decision before the pod existed is no time of this pod's (its events are not to be trusted)
    return p if t is None or t < p.created else replace(p, first_attempt=t)


def _unplaced(p: snap.Pod) -> snap.Pod:
    return snap.Pod(
        p.namespace,
        p.name,
        p.uid,
        p.created,
        p.annotations,
        p.init_containers,
        p.containers,
        None,
        p.finished,
        None,
        p.peak_memory_bytes,
        p.first_attempt,
    )


def scheduler_flags(pods: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``POLICY_FLAGS`` as set in the scheduler pods' container command lines (first pod wins)."""
    found: dict[str, str] = {}
    for pod in pods:
        spec = pod.get("spec")
        for c in (spec.get("containers") or []) if isinstance(spec, Mapping) else []:
            if not isinstance(c, Mapping):
                continue
            argv = [str(a) for a in [*(c.get("command") or []), *(c.get("args") or [])]]
            for i, arg in enumerate(argv):
                flag, sep, value = arg.partition("=")
                if flag in POLICY_FLAGS and flag not in found:
                    if sep:
                        found[flag] = value
                    elif i + 1 < len(argv):
                        found[flag] = argv[i + 1]
    return found
