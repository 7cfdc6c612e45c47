"""A generated scheduling history: a GPU cluster's nodes and pods as the API holds them afterwards.

The cluster is played at full time resolution: pods arrive (exponential gaps), kube-scheduler hands
each to the extender at once (``filter_pod`` + ``commit`` over every node, in the order the API
lists them), pods that fit nowhere wait and are all retried, in arrival order and over every node,
whenever a pod finishes. The objects then carry what the API keeps: whole-second
``creationTimestamp``, ``hami.io/vgpu-time`` and ``finishedAt``, and the extender's
``FilteringSucceed`` / ``FilteringFailed`` events of each pod (the first of each: a repeat is
counted on it), named as client-go names events (the nanosecond time in hex). ``exact`` keeps the
true times, so a test can tell which differences of a replay come from the lost sub-second order.

Nodes mix 40 GB and 16 GB cards; pods mix memory sizes, core shares, whole cards, percentages
and two-card requests. Used by the simulator's fidelity test and ``bench/bench_simulate.py``.
"""

from __future__ import annotations

import heapq
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hami.core import annotations as ann
from hami.core.codec.handshake import Handshake, format_handshake
from hami.core.codec.node_devices import encode_node_devices
from hami.core.codec.pod_devices import encode_pod_devices
from hami.core.devices import MODE_HAMI_CORE, DeviceInfo
from hami.scheduler.engine.decision import FilterConfig, commit, filter_pod
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.ranking import Ranker
from hami.scheduler.engine.requests import pod_request
from hami.scheduler.engine.usage import UsageIndex

Obj = dict[str, Any]
SCHEDULER_NAME = "hami-scheduler"
CARDS = (("NVIDIA A100-SXM4-40GB", 40960), ("NVIDIA Tesla T4", 15360))
NAMESPACES = ("ml-train", "ml-infer", "notebooks", "batch")


@dataclass(frozen=True)
class HistorySpec:
    nodes: int = 200
    gpus: int = 8
    pods: int = 2000
    mean_gap: float = 30.0  # seconds between arrivals
    mean_life: float = 4 * 3600.0  # seconds a pod runs
    min_life: float = 0.0  # added to every pod's run
    split: int = 10
    node_policy: str = "binpack"
    gpu_policy: str = "spread"
    seed: int = 1
    start: float = 1_750_000_000.0  # unix seconds


@dataclass
class History:
    spec: HistorySpec
    nodes: list[Obj]
    pods: list[Obj]
    taken: datetime
    # uid -> (created, scheduled or None, finished or None) at full resolution
    exact: dict[str, tuple[float, float | None, float | None]] = field(default_factory=dict)
    # uids in the order the extender first filtered them
    order: list[str] = field(default_factory=list)
    events: list[Obj] = field(default_factory=list)  # the extender's filter events


def decision_event(pod: Obj, placed: bool, at: float) -> Obj:
    """The extender's event for one filter of ``pod`` at ``at``, as the API holds it."""
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{int(at * 1e9):x}", "namespace": meta["namespace"]},
        "involvedObject": {
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        },
        "reason": "FilteringSucceed" if placed else "FilteringFailed",
        "type": "Normal" if placed else "Warning",
        "firstTimestamp": _rfc3339(at),
        "lastTimestamp": _rfc3339(at),
        "count": 1,
    }


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(int(t), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _devices(spec: HistorySpec, n: int) -> list[DeviceInfo]:
    model, mem = CARDS[0] if n % 5 < 3 else CARDS[1]
    return [
        DeviceInfo(
            id=f"GPU-{n:08x}-{i:04x}-4000-8000-{n * spec.gpus + i:012x}",
            index=i,
            count=spec.split,
            devmem=mem,
            devcore=100,
            type=model,
            numa=i * 2 // spec.gpus,
            mode=MODE_HAMI_CORE,
            health=True,
            device_vendor=ann.VENDOR_NVIDIA,
        )
        for i in range(spec.gpus)
    ]


def node_object(name: str, devices: list[DeviceInfo], taken: datetime) -> Obj:
    count = sum(d.count for d in devices)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                ann.NODE_REGISTER: encode_node_devices(devices),
                ann.NODE_HANDSHAKE: format_handshake(Handshake("Reported", taken)),
            },
        },
        "status": {"allocatable": {ann.RESOURCE_GPU: str(count)}, "capacity": {ann.RESOURCE_GPU: str(count)}},
    }


def _limits(rng: random.Random) -> dict[str, str]:
    """One container's request: mostly a share of one card, sometimes a whole card or two."""
    roll = rng.random()
    if roll < 0.08:
        return {ann.RESOURCE_GPU: "1", ann.RESOURCE_GPUMEM_PERCENTAGE: "100", ann.RESOURCE_GPUCORES: "100"}
    if roll < 0.15:
        return {
            ann.RESOURCE_GPU: "2",
            ann.RESOURCE_GPUMEM: str(rng.choice((8192, 12288))),
            ann.RESOURCE_GPUCORES: "30",
        }
    if roll < 0.22:
        return {ann.RESOURCE_GPU: "1", ann.RESOURCE_GPUMEM_PERCENTAGE: str(rng.choice((25, 50)))}
    limits = {
        ann.RESOURCE_GPU: "1",
        ann.RESOURCE_GPUMEM: str(rng.choice((1024, 2048, 4096, 4096, 8192, 12288))),
    }
    cores = rng.choice((0, 0, 10, 20, 30, 50))
    if cores:
        limits[ann.RESOURCE_GPUCORES] = str(cores)
    return limits


@dataclass
class _Pod:
    obj: Obj
    created: float
    life: float
    scheduled: float | None = None
    finished: float | None = None
    devices: Any = None
    node: str | None = None


def generate(spec: HistorySpec) -> History:
    """Play the history; pods still running or waiting at the end keep that state."""
    rng = random.Random(spec.seed)
    devices = [_devices(spec, n) for n in range(spec.nodes)]
    states = [NodeState(f"gpu-node-{n:04d}", tuple(devs)) for n, devs in enumerate(devices)]
    config = FilterConfig(node_policy=spec.node_policy, gpu_policy=spec.gpu_policy)
    usage, quotas, ranks = UsageIndex(), QuotaManager(config.nvidia), Ranker(size=128)
    pods: list[_Pod] = []
    t = spec.start
    for i in range(spec.pods):
        t += rng.expovariate(1 / spec.mean_gap)
        ns = rng.choice(NAMESPACES)
        uid = str(uuid.UUID(int=rng.getrandbits(128)))
        obj: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"job-{i:06d}",
                "namespace": ns,
                "uid": uid,
                "creationTimestamp": _rfc3339(t),
            },
            "spec": {
                "schedulerName": SCHEDULER_NAME,
                "containers": [{"name": "main", "image": "x", "resources": {"limits": _limits(rng)}}],
            },
        }
        pods.append(_Pod(obj, t, spec.min_life + rng.expovariate(1 / spec.mean_life)))
    end = t + 60.0
    order: list[str] = []
    events: list[tuple[float, int, int]] = []  # (time, kind 0=finish 1=arrive, pod index)
    for i, p in enumerate(pods):
        heapq.heappush(events, (p.created, 1, i))
    waiting: list[int] = []

    def place(i: int, now: float) -> bool:
        p = pods[i]
        request = pod_request(p.obj, config.nvidia)
        assert request is not None, "every generated pod asks for a GPU"
        result = filter_pod(request, states, usage, quotas, config, ranks=ranks)
        uid = p.obj["metadata"]["uid"]
        if uid not in seen:
            order.append(uid)
        if (uid, result.node is not None) not in seen:  # a repeat is counted on the first event
            decisions.append(decision_event(p.obj, result.node is not None, now))
        seen.update((uid, (uid, result.node is not None)))
        if result.node is None:
            return False
        commit(result, usage, quotas)
        p.node, p.devices, p.scheduled = result.node, result.devices, now
        if now + p.life < end:
            heapq.heappush(events, (now + p.life, 0, i))
        return True

    seen: set[object] = set()
    decisions: list[Obj] = []
    while events:
        now, kind, i = heapq.heappop(events)
        if kind == 1:
            if not place(i, now):
                waiting.append(i)
            continue
        pods[i].finished = now
        usage.remove(pods[i].obj["metadata"]["uid"])
        # Every waiting pod, in arrival order, over every node; a pod asking what one asked in vain
        # this round fails the same way (the state is the same), so it is not filtered again.
        refused: set[str] = set()
        still: list[int] = []
        for w in waiting:
            ask = repr(pods[w].obj["spec"]["containers"][0]["resources"])
            if ask in refused or not place(w, now):
                refused.add(ask)
                still.append(w)
        waiting = still
    taken = datetime.fromtimestamp(end, UTC)
    history = History(
        spec,
        [node_object(s.name, devs, taken) for s, devs in zip(states, devices, strict=True)],
        [],
        taken,
        order=order,
        events=decisions,
    )
    for p in pods:
        history.pods.append(_finish(p))
        history.exact[p.obj["metadata"]["uid"]] = (p.created, p.scheduled, p.finished)
    return history


def _finish(p: _Pod) -> Obj:
    obj = p.obj
    if p.node is None:
        obj["status"] = {"phase": "Pending"}
        return obj
    text = encode_pod_devices(p.devices)
    assert p.scheduled is not None
    obj["metadata"]["annotations"] = {
        ann.POD_VGPU_NODE: p.node,
        ann.POD_VGPU_TIME: str(int(p.scheduled)),
        ann.POD_DEVICES_TO_ALLOCATE: text,
        ann.POD_DEVICES_ALLOCATED: text,
        ann.POD_BIND_PHASE: ann.BIND_PHASE_SUCCESS,
        ann.POD_BIND_TIME: str(int(p.scheduled)),
    }
    obj["spec"]["nodeName"] = p.node
    if p.finished is None:
        obj["status"] = {"phase": "Running"}
    else:
        finished = _rfc3339(p.finished)
        obj["status"] = {
            "phase": "Succeeded",
            "containerStatuses": [
                {"name": "main", "state": {"terminated": {"exitCode": 0, "finishedAt": finished}}}
            ],
        }
    return obj
