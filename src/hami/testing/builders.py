"""Builders of what tests, benchmarks and the demo hand to the scheduling engine or put into the API
emulator: devices (``DeviceInfo``) and plain Kubernetes API dicts (pods, nodes, quotas, events).

Objects carry only what is given (no defaulting beyond ``apiVersion``/``kind``), so a test states
every field its behaviour depends on.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from hami.core import annotations as ann
from hami.core.codec.node_devices import encode_node_devices
from hami.core.devices import MODE_HAMI_CORE, DeviceInfo, MigPlacement, MigProfile

Obj = dict[str, Any]
T4 = "NVIDIA-Tesla T4"


# ---- devices ----


def dev(uuid: str, mem: int = 8000, *, count: int = 10, cores: int = 100, type: str = "NVIDIA",
        numa: int = 0, health: bool = True, index: int = 0, mode: str = MODE_HAMI_CORE,
        pair: dict[str, int] | None = None, profiles: tuple[MigProfile, ...] = ()) -> DeviceInfo:
    """An NVIDIA device as the device plugin registers it (``count`` vGPU slots, ``mem`` MiB)."""
    return DeviceInfo(id=uuid, index=index, count=count, devmem=mem, devcore=cores, type=type, numa=numa,
                      mode=mode, health=health, mig_profiles=profiles, device_vendor=ann.VENDOR_NVIDIA,
                      pair_score=pair or {})


def _profile(name: str, shape: tuple[int, int, int], starts: tuple[int, ...], size: int) -> MigProfile:
    mem, core, slices = shape
    return MigProfile(name, mem, core, slices, tuple(MigPlacement(s, size) for s in starts))


# An A100-SXM4-40GB's GPU-instance profiles as NVML reports them (placements in 1/8 memory slices).
A100_40GB_PROFILES = (
    _profile("1g.5gb", (4864, 14, 1), (0, 1, 2, 3, 4, 5, 6), 1),
    _profile("2g.10gb", (9984, 28, 2), (0, 2, 4), 2),
    _profile("3g.20gb", (19968, 42, 3), (0, 4), 4),
    _profile("4g.20gb", (19968, 57, 4), (0,), 4),
    _profile("7g.40gb", (40192, 100, 7), (0,), 8),
)


def mig_dev(uuid: str, *, index: int = 0, profiles: tuple[MigProfile, ...] = A100_40GB_PROFILES,
            health: bool = True) -> DeviceInfo:
    """An A100-40GB in ``mig`` mode as the device plugin registers it (count = most instances)."""
    return dev(uuid, 40960, count=7, index=index, mode="mig", type="NVIDIA A100-SXM4-40GB",
               health=health, profiles=profiles)


# ---- pods ----


def limits(gpu: int | str | None = 1, mem: int | str | None = None, cores: int | str | None = None,
           pct: int | str | None = None) -> dict[str, str]:
    """HAMi's resource limits: ``nvidia.com/gpu``, ``gpumem`` (MiB), ``gpucores``, ``gpumem-percentage``."""
    out: dict[str, str] = {}
    for key, value in ((ann.RESOURCE_GPU, gpu), (ann.RESOURCE_GPUMEM, mem), (ann.RESOURCE_GPUCORES, cores),
                       (ann.RESOURCE_GPUMEM_PERCENTAGE, pct)):
        if value is not None:
            out[key] = str(value)
    return out


def res(gpu: int | str | None = 1, mem: int | str | None = None, cores: int | str | None = None,
        pct: int | str | None = None) -> Obj:
    """A container (no name: ``pod`` names it) with ``limits(...)``."""
    return {"resources": {"limits": limits(gpu, mem, cores, pct)}}


def pod(*containers: Obj, init: Sequence[Obj] = (), name: str = "p1", namespace: str = "default",
        uid: str | None = None, annotations: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None, node_name: str = "", scheduler: str = "",
        phase: str = "Pending") -> Obj:
    """A pod; containers without a name are called ``c0``, ``c1``... and ``init0``... in order.

    ``uid`` is left out unless given: the emulator assigns one to what it stores.
    """

    def named(prefix: str, items: Sequence[Obj]) -> list[Obj]:
        return [{"name": f"{prefix}{i}", **c} for i, c in enumerate(items)]

    meta: Obj = {"name": name, "namespace": namespace, "annotations": dict(annotations or {}),
                 "labels": dict(labels or {})}
    if uid is not None:
        meta["uid"] = uid
    spec: Obj = {"initContainers": named("init", init), "containers": named("c", containers)}
    if scheduler:
        spec["schedulerName"] = scheduler
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def gpu_pod(name: str, *, gpus: int = 1, mem: int | None = 1000, cores: int | None = None,
            namespace: str = "default", labels: dict[str, str] | None = None) -> Obj:
    """A pending pod of one container asking for ``gpus`` vGPUs of ``mem`` MiB and ``cores`` % each."""
    return pod(res(gpus, mem, cores), name=name, namespace=namespace, labels=labels)


def allocating_pod(name: str, node: str, devices: str | None, *containers: Obj, init: Sequence[Obj] = (),
                   bind_time: int = 1_755_757_239) -> Obj:
    """A pod the scheduler bound to ``node`` with ``devices`` reserved (HAMi's encoding; None: no
    annotation), as the device plugin's Allocate finds it: bind phase ``allocating``."""
    annos = {
        ann.POD_VGPU_NODE: node,
        ann.POD_BIND_TIME: str(bind_time),
        ann.POD_BIND_PHASE: ann.BIND_PHASE_ALLOCATING,
    }
    if devices is not None:
        annos[ann.POD_DEVICES_TO_ALLOCATE] = devices
        annos[ann.POD_DEVICES_ALLOCATED] = devices
    return pod(*containers, init=init, name=name, annotations=annos, node_name=node)


# ---- nodes ----


def node(name: str, *, annotations: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
         allocatable: Mapping[str, str] | None = None, capacity: Mapping[str, str] | None = None,
         conditions: Sequence[Obj] | None = None) -> Obj:
    status: Obj = {"allocatable": dict(allocatable or {})}
    if capacity is not None:
        status["capacity"] = dict(capacity)
    if conditions is not None:
        status["conditions"] = list(conditions)
    meta: Obj = {"name": name, "annotations": dict(annotations or {})}
    if labels is not None:
        meta["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "status": status}


def gpu_node(name: str, *, gpus: int = 2, mem: int = 8000, count: int = 10,
             devices: Sequence[DeviceInfo] | None = None, annotations: Mapping[str, str] | None = None,
             allocatable: int | None = None) -> Obj:
    """A node whose device plugin registered ``devices`` (default: ``gpus`` T4s of ``mem`` MiB split
    ``count`` ways, UUIDs ``GPU-<name>-<i>``); ``allocatable`` overrides the number of registered
    GPUs the node reports (as ``nvidia.com/gpu`` = GPUs x slots)."""
    devs = list(devices) if devices is not None else [
        dev(f"GPU-{name}-{i}", mem, count=count, index=i, type=T4) for i in range(gpus)
    ]
    slots = sum(d.count for d in devs) if allocatable is None else allocatable * count
    return node(name, annotations={ann.NODE_REGISTER: encode_node_devices(devs), **(annotations or {})},
                allocatable={ann.RESOURCE_GPU: str(slots)})


def mig_node(name: str) -> Obj:
    """A node with one A100-40GB in ``mig`` mode (``GPU-<name>-0``)."""
    return gpu_node(name, devices=[mig_dev(f"GPU-{name}-0")])


# ---- other kinds ----


def resource_quota(namespace: str, name: str = "q", **hard: str) -> Obj:
    """A ResourceQuota on HAMi's resources: ``resource_quota("ns", gpumem="1500")``."""
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"namespace": namespace, "name": name},
            "spec": {"hard": {f"limits.nvidia.com/{k}": v for k, v in hard.items()}}}


def event(pod_name: str, reason: str, message: str, *, namespace: str = "default", type_: str = "Warning",
          at: str = "2025-06-13T09:09:30Z", count: int = 1, source: str = "hami-scheduler",
          name: str = "") -> Obj:
    """A core/v1 Event about a pod; the name is derived from pod, reason and message unless given."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": name or f"{pod_name}.{reason.lower()}.{zlib.crc32(message.encode()):08x}",
            "namespace": namespace,
        },
        "involvedObject": {"kind": "Pod", "name": pod_name, "namespace": namespace, "apiVersion": "v1"},
        "reason": reason,
        "message": message,
        "type": type_,
        "count": count,
        "firstTimestamp": at,
        "lastTimestamp": at,
        "source": {"component": source},
    }
