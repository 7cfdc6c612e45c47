"""The simulated cluster of the demo and the integration tests, as Kubernetes objects.

- ``sim-node``: the GPU node the simulated node process, the monitor and the device plugin run for.
  Seeded with the ``hami.io/node-nvidia-register`` annotation the device plugin writes (the plugin
  rewrites it when it starts) and a fresh handshake.
- ``stale-node``: a GPU node whose device plugin went away: the scheduler's ``Requesting`` handshake
  is 20 minutes old and unanswered, and kubelet advertises no allocatable GPU (expired handshake: the
  scheduler drops the node).
- GPU pods bound to ``sim-node`` with ``hami.io/vgpu-devices-allocated``: their containers get
  HAMi-core regions on the simulated node.
- ``scenarios/overlimit``: a pod whose container will use more than its vGPU memory limit.
- ``notebooks/jupyter-idle``: a container whose last kernel ran two hours ago (an idle vGPU).
- ``scenarios/unlimited``: a container given a vGPU that sets ``CUDA_DISABLE_CONTROL=true``, so
  HAMi-core never loads: its GPU process runs unlimited (the simulated node lists it in NVML).
- sim-node's GPUs (``fake_nvml_spec`` with scenarios): the last one, besides the XIDs, has a failed
  row remap; the one before runs hot, 3 degrees under its slowdown temperature, its clocks held back
  by a software thermal slowdown.
- ``locked-node``: a GPU node left locked by a bind that crashed 10 minutes ago, no device plugin;
  ``scenarios/pinned-to-locked-node`` asks for its GPU, so the scheduler breaks the expired lock,
  binds, and then holds the new lock until it expires (no kubelet there ever allocates).
- ``scenarios/pending-gpu``: a pod asking for more GPU memory than any card has, never bound.

Objects are built by pure functions; ``seed`` writes them to an API server over HTTP.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import requests

from hami.core import annotations as ann
from hami.core.codec.handshake import REPORTED, Handshake, format_handshake, format_requesting
from hami.core.codec.node_devices import encode_node_devices
from hami.core.codec.nodelock import NodeLock, format_node_lock
from hami.core.codec.pod_devices import encode_pod_devices
from hami.core.devices import ContainerDevice, DeviceInfo
from hami.core.hamicore import DISABLE_CONTROL_ENV
from hami.testing.builders import dev, limits, node, pod

NODE = "sim-node"
STALE_NODE = "stale-node"
LOCKED_NODE = "locked-node"
GPU_TYPE = "NVIDIA A100-SXM4-40GB"
GPU_MEM_MIB = 40960
SPLIT_COUNT = 10
SCHEDULER_NAME = "hami-scheduler"
POOL_LABEL = "hami.io/pool"


def gpu_uuid(node_index: int, i: int) -> str:
    return f"GPU-{i:08x}-{node_index:04x}-4000-8000-{i:012x}"


@dataclass(frozen=True)
class GpuPod:
    namespace: str
    name: str
    gpu: int  # index on sim-node
    mem_mib: int
    cores: int
    labels: tuple[tuple[str, str], ...] = ()


# The workloads of sim-node (several namespaces, so the namespace variable has choices).
POD_SPECS: tuple[GpuPod, ...] = (
    GpuPod("ml-train", "bert-train-0", 0, 8192, 50, (("app", "bert-train"),)),
    GpuPod("ml-train", "bert-train-1", 1, 8192, 50, (("app", "bert-train"),)),
    GpuPod("ml-train", "resnet-0", 2, 4096, 30, (("app", "resnet"),)),
    GpuPod("ml-infer", "llm-serve-0", 0, 16384, 0, (("app", "llm-serve"),)),
    GpuPod("ml-infer", "llm-serve-1", 3, 16384, 0, (("app", "llm-serve"),)),
    GpuPod("ml-infer", "embed-0", 2, 2048, 20, (("app", "embed"),)),
    GpuPod("notebooks", "jupyter-alice", 1, 4096, 20, (("app", "jupyter"),)),
    GpuPod("notebooks", "jupyter-bob", 3, 4096, 20, (("app", "jupyter"),)),
)
OVERLIMIT = GpuPod("scenarios", "overlimit", 2, 1024, 20, (("app", "overlimit"),))
IDLE = GpuPod("notebooks", "jupyter-idle", 1, 2048, 10, (("app", "jupyter"),))  # no kernel for hours
UNLIMITED = GpuPod("scenarios", "unlimited", 1, 2048, 10, (("app", "unlimited"),))  # no HAMi-core
PENDING = "pending-gpu"
PINNED = "pinned-to-locked-node"


def devices(node_index: int, gpus: int) -> list[DeviceInfo]:
    return [dev(gpu_uuid(node_index, i), GPU_MEM_MIB, count=SPLIT_COUNT, index=i, type=GPU_TYPE)
            for i in range(gpus)]


XID_FALLEN_OFF_BUS = 79  # the critical Xid the scenarios raise on the last GPU
SLOWDOWN_C = 90  # the fake's default slowdown temperature
SW_THERMAL_SLOWDOWN = 0x20  # nvmlClocksEventReasonSwThermalSlowdown


def fake_nvml_spec(gpus: int, scenarios: bool = False) -> dict[str, Any]:
    """The FakeNvml description of sim-node's GPUs (same UUIDs as its register annotation); with
    ``scenarios``, the hardware faults of the module docstring (A100s remap rows: no retired pages)."""
    devices: list[dict[str, Any]] = [
        {
            "uuid": gpu_uuid(0, i),
            "name": GPU_TYPE,
            "memory_mib": GPU_MEM_MIB,
            "numa": 0,
            "compute_capability": [8, 0],
            "temperature": 40 + i,
            "power_mw": 60000 + 1000 * i,
        }
        for i in range(gpus)
    ]
    if scenarios and gpus >= 2:
        devices[-1]["remapped_rows"] = {"uncorrectable": 3, "failure": True}
        devices[-2]["temperature"] = SLOWDOWN_C - 3
        devices[-2]["clock_event_reasons"] = SW_THERMAL_SLOWDOWN
    return {"driver_version": "550.54.15", "cuda_driver_version": 12040, "devices": devices}


def gpu_node(
    name: str, node_index: int, gpus: int, handshake: str, pool: str, *, allocatable: int | None = None
) -> dict[str, Any]:
    """A GPU node; ``allocatable`` overrides the GPUs kubelet advertises (0 once its plugin is gone)."""
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", ann.RESOURCE_GPU: str(gpus * SPLIT_COUNT)}
    slots = gpus * SPLIT_COUNT if allocatable is None else allocatable
    return node(
        name,
        labels={"kubernetes.io/hostname": name, "gpu": "on", POOL_LABEL: pool},
        annotations={
            ann.NODE_REGISTER: encode_node_devices(devices(node_index, gpus)),
            ann.NODE_HANDSHAKE: handshake,
        },
        capacity=resources,
        allocatable={**resources, ann.RESOURCE_GPU: str(slots)},
        conditions=[{"type": "Ready", "status": "True"}],
    )


def _container(mem_mib: int, cores: int) -> dict[str, Any]:
    return {
        "name": "main",
        "image": "nvcr.io/nvidia/pytorch:24.01-py3",
        "resources": {"limits": limits(1, mem_mib, cores or None)},
    }


def container_id(namespace: str, pod_name: str, container: str) -> str:
    """The runtime's 64-hex ID of a container (stable, so the simulated node can name its cgroup)."""
    return hashlib.sha256(f"{namespace}/{pod_name}/{container}".encode()).hexdigest()


def gpu_pod(p: GpuPod) -> dict[str, Any]:
    """A Running pod the scheduler placed on sim-node and the device plugin allocated."""
    alloc = encode_pod_devices([[ContainerDevice(gpu_uuid(0, p.gpu), ann.VENDOR_NVIDIA, p.mem_mib, p.cores)]])
    return pod(
        _container(p.mem_mib, p.cores),
        name=p.name,
        namespace=p.namespace,
        labels={**dict(p.labels), ann.POD_VGPU_NODE: NODE},
        annotations={
            ann.POD_VGPU_NODE: NODE,
            ann.POD_DEVICES_TO_ALLOCATE: ";",
            ann.POD_DEVICES_ALLOCATED: alloc,
            ann.POD_BIND_PHASE: ann.BIND_PHASE_SUCCESS,
        },
        node_name=NODE,
        scheduler=SCHEDULER_NAME,
        phase="Running",
    )


def unlimited_pod() -> dict[str, Any]:
    """``UNLIMITED`` with ``CUDA_DISABLE_CONTROL=true`` and the container status that names its
    container ID (what the monitor matches a GPU process's cgroup against)."""
    p = gpu_pod(UNLIMITED)
    p["spec"]["containers"][0]["env"] = [{"name": DISABLE_CONTROL_ENV, "value": "true"}]
    name = p["spec"]["containers"][0]["name"]
    p["status"]["containerStatuses"] = [
        {
            "name": name,
            "containerID": f"containerd://{container_id(UNLIMITED.namespace, UNLIMITED.name, name)}",
            "image": p["spec"]["containers"][0]["image"],
            "ready": True,
            "restartCount": 0,
            "state": {"running": {}},
        }
    ]
    return p


def pinned_pod() -> dict[str, Any]:
    """A pod for locked-node's GPU only (``nvidia.com/use-gpuuuid``)."""
    return pod(
        _container(1024, 0),
        name=PINNED,
        namespace="scenarios",
        labels={"app": PINNED},
        annotations={ann.POD_USE_GPUUUID: gpu_uuid(2, 0)},
        scheduler=SCHEDULER_NAME,
    )


def pending_pod() -> dict[str, Any]:
    """More GPU memory than any card has: no node fits, the pod stays Pending."""
    return pod(
        _container(GPU_MEM_MIB * 4, 0),
        name=PENDING,
        namespace="scenarios",
        labels={"app": PENDING},
        scheduler=SCHEDULER_NAME,
    )


def objects(gpus: int, now: datetime, scenarios: bool) -> list[dict[str, Any]]:
    """Every object of the simulated cluster, nodes first."""
    out = [gpu_node(NODE, 0, gpus, format_handshake(Handshake(REPORTED, now)), "a100")]
    if scenarios:
        # the scheduler asked 20 minutes ago and no device plugin answered
        stale = format_requesting(now - timedelta(minutes=20))
        out.append(gpu_node(STALE_NODE, 1, 2, stale, "a100", allocatable=0))
        locked = gpu_node(LOCKED_NODE, 2, 1, format_handshake(Handshake(REPORTED, now)), "a100")
        crashed = NodeLock(now - timedelta(minutes=10), "scenarios", "crashed-bind")
        locked["metadata"]["annotations"][ann.NODE_LOCK] = format_node_lock(crashed)
        out.append(locked)
    out += [gpu_pod(p) for p in POD_SPECS if p.gpu < gpus]
    if scenarios:
        out += [gpu_pod(OVERLIMIT), gpu_pod(IDLE), unlimited_pod(), pending_pod(), pinned_pod()]
    return out


def _path(obj: dict[str, Any]) -> str:
    if obj["kind"] == "Node":
        return "/api/v1/nodes"
    return f"/api/v1/namespaces/{obj['metadata']['namespace']}/pods"


def seed(api_url: str, objs: list[dict[str, Any]], timeout: float = 10.0) -> None:
    """Creates ``objs`` through the API, then writes each status (create resets a pod to Pending)."""
    with requests.Session() as s:
        for obj in objs:
            base = api_url + _path(obj)
            r = s.post(base, json=obj, timeout=timeout)
            if r.status_code not in (200, 201):
                raise RuntimeError(
                    f"creating {obj['kind']} {obj['metadata']['name']}: {r.status_code} {r.text}"
                )
            url = f"{base}/{obj['metadata']['name']}/status"
            r = s.patch(
                url,
                json={"status": obj["status"]},
                headers={"Content-Type": "application/merge-patch+json"},
                timeout=timeout,
            )
            if r.status_code != 200:
                raise RuntimeError(f"setting status of {obj['metadata']['name']}: {r.status_code} {r.text}")
