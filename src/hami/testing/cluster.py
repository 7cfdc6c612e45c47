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
- Over-commit: sim-node's device plugin registers its cards with ``deviceMemoryScaling: 1.5`` (the
  scenarios' register annotation says so from the start), and ``scenarios/leaky-trainer`` takes its
  card's limits past the physical memory; the simulated node makes its memory use grow steadily.
- ``driver-node``: one A100 whose device plugin runs ``--memory-enforcement driver`` (its cards register
  ``memoryEnforcement: driver``), with its own kubelet stand-in and simulated host (monitor).
  ``scenarios/driver-limited`` asks for such a card (``hami.io/memory-enforcement: driver``), so the
  scheduler places it there; its Allocate gives it ``NVIDIA_GPU_MEMORY_LIMIT``/``_REQUEST``, which the
  simulated host applies as the toolkit's hook would, and HAMi-core, still loaded, keeps its region.
- ``fragmented-node``: four L4 cards, each with 1.5 GiB free, 6 GiB in all; ``scenarios/l4-inference``
  asks for an L4 with 4 GiB (``nvidia.com/use-gputype``) and stays Pending: it would fit the node's
  free memory, on no single card. Its device plugin is stood in for by the stack's handshake reports.

Objects are built by pure functions; ``seed`` writes them to an API server over HTTP.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import requests
import yaml

from hami.core import annotations as ann
from hami.core.codec.handshake import REPORTED, Handshake, format_handshake, format_requesting
from hami.core.codec.node_devices import encode_node_devices
from hami.core.codec.nodelock import NodeLock, format_node_lock
from hami.core.codec.pod_devices import encode_pod_devices
from hami.core.devices import ENFORCE_DRIVER, ContainerDevice, DeviceInfo
from hami.core.hamicore import DISABLE_CONTROL_ENV
from hami.testing.builders import dev, limits, node, pod

NODE = "sim-node"
STALE_NODE = "stale-node"
LOCKED_NODE = "locked-node"
FRAG_NODE = "fragmented-node"
DRIVER_NODE = "driver-node"
DRIVER_GPUS = 1
# the node part of its GPU UUIDs
NODE_INDEX = {NODE: 0, STALE_NODE: 1, LOCKED_NODE: 2, FRAG_NODE: 3, DRIVER_NODE: 4}
GPU_TYPE = "NVIDIA A100-SXM4-40GB"
GPU_MEM_MIB = 40960
MEMORY_SCALING = 1.5  # sim-node's deviceMemoryScaling with the scenarios (its plugin's node config)
FRAG_GPU_TYPE = "NVIDIA L4"
FRAG_GPU_MEM_MIB = 23034
FRAG_GPUS = 4
SPLIT_COUNT = 10
SCHEDULER_NAME = "hami-scheduler"
POOL_LABEL = "hami.io/pool"


def gpu_uuid(node_index: int, i: int) -> str:
    return f"GPU-{i:08x}-{node_index:04x}-4000-8000-{i:012x}"


@dataclass(frozen=True)
class GpuPod:
    namespace: str
    name: str
    gpu: int  # index on its node
    mem_mib: int
    cores: int
    labels: tuple[tuple[str, str], ...] = ()
    node: str = NODE


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
# The driver's accounting (hami.demo.simdriver): a container the driver limits (scheduled onto
# driver-node), and one on sim-node whose HAMi-core reports less than the driver accounts to it.
DRIVER_LIMITED = GpuPod("scenarios", "driver-limited", 0, 2048, 10, (("app", "driver-limited"),), DRIVER_NODE)
SHIM_UNDERREPORTS = GpuPod("scenarios", "shim-underreports", 3, 4096, 10, (("app", "shim-underreports"),))
# With resnet-0, embed-0 and overlimit its card's limits add up to 43 GiB of 40 (61440 MiB schedulable).
LEAKY = GpuPod("scenarios", "leaky-trainer", 2, 36864, 20, (("app", "leaky-trainer"),))
OVERCOMMIT_GPU = LEAKY.gpu
# fragmented-node: each L4 (23034 MiB) has 21504 MiB allocated, in one or two pods.
FRAG_PODS: tuple[GpuPod, ...] = tuple(
    GpuPod("ml-infer", name, gpu, mem, cores, (("app", name.rsplit("-", 1)[0]),), FRAG_NODE)
    for name, gpu, mem, cores in (
        ("asr-0", 0, 12288, 50), ("asr-1", 0, 9216, 40), ("ocr-0", 1, 21504, 60), ("tts-0", 2, 16384, 50),
        ("tts-1", 2, 5120, 30), ("rerank-0", 3, 10240, 40), ("rerank-1", 3, 11264, 40),
    )
)  # fmt: skip
FRAG_PENDING = "l4-inference"
FRAG_REQUEST_MIB = 4096  # above every L4's free 1530 MiB, within their 6120 MiB in all
PENDING = "pending-gpu"
PINNED = "pinned-to-locked-node"


def devices(
    node_index: int, gpus: int, mem_mib: int = GPU_MEM_MIB, gpu_type: str = GPU_TYPE, enforcement: str = ""
) -> list[DeviceInfo]:
    return [replace(dev(gpu_uuid(node_index, i), mem_mib, count=SPLIT_COUNT, index=i, type=gpu_type),
                    enforcement=enforcement)
            for i in range(gpus)]


XID_FALLEN_OFF_BUS = 79  # the critical Xid the scenarios raise on the last GPU
SLOWDOWN_C = 90  # the fake's default slowdown temperature
SW_THERMAL_SLOWDOWN = 0x20  # nvmlClocksEventReasonSwThermalSlowdown


def fake_nvml_spec(gpus: int, scenarios: bool = False, node_index: int = 0) -> dict[str, Any]:
    """The FakeNvml description of a node's GPUs (sim-node's by default; same UUIDs as its register
    annotation); with ``scenarios``, the hardware faults of the module docstring (A100s remap rows: no
    retired pages)."""
    devices: list[dict[str, Any]] = [
        {
            "uuid": gpu_uuid(node_index, i),
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


def write_fake_nvml_spec(
    path: Path, gpus: int, scenarios: bool, xid_every: float, node_index: int = 0
) -> Path:
    """The device plugin's fake NVML spec at ``path`` (kept if there): ``fake_nvml_spec`` with the
    XIDs simhost injects into the monitor's fake scheduled here too (the plugin's fake lives in the
    plugin's process)."""
    if not path.exists():
        spec = fake_nvml_spec(gpus, scenarios, node_index)
        if xid_every > 0:
            event = {"after_seconds": xid_every, "device": gpus - 1, "xid": XID_FALLEN_OFF_BUS}
            spec["events"] = [{**event, "every_seconds": xid_every}]
        path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def gpu_node(
    name: str,
    node_index: int,
    gpus: int,
    handshake: str,
    pool: str,
    *,
    allocatable: int | None = None,
    mem_mib: int = GPU_MEM_MIB,
    gpu_type: str = GPU_TYPE,
    enforcement: str = "",
) -> dict[str, Any]:
    """A GPU node whose plugin registered ``mem_mib`` per card (deviceMemoryScaling applied) under
    ``enforcement``; ``allocatable`` overrides the GPUs kubelet advertises (0 once its plugin is gone)."""
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", ann.RESOURCE_GPU: str(gpus * SPLIT_COUNT)}
    slots = gpus * SPLIT_COUNT if allocatable is None else allocatable
    return node(
        name,
        labels={"kubernetes.io/hostname": name, "gpu": "on", POOL_LABEL: pool},
        annotations={
            ann.NODE_REGISTER: encode_node_devices(devices(node_index, gpus, mem_mib, gpu_type, enforcement)),
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
    """A Running pod the scheduler placed on its node and the device plugin allocated."""
    uuid = gpu_uuid(NODE_INDEX[p.node], p.gpu)
    alloc = encode_pod_devices([[ContainerDevice(uuid, ann.VENDOR_NVIDIA, p.mem_mib, p.cores)]])
    return pod(
        _container(p.mem_mib, p.cores),
        name=p.name,
        namespace=p.namespace,
        labels={**dict(p.labels), ann.POD_VGPU_NODE: p.node},
        annotations={
            ann.POD_VGPU_NODE: p.node,
            ann.POD_DEVICES_TO_ALLOCATE: ";",
            ann.POD_DEVICES_ALLOCATED: alloc,
            ann.POD_BIND_PHASE: ann.BIND_PHASE_SUCCESS,
        },
        node_name=p.node,
        scheduler=SCHEDULER_NAME,
        phase="Running",
    )


def unlimited_pod() -> dict[str, Any]:
    """``UNLIMITED`` with ``CUDA_DISABLE_CONTROL=true`` and the container status that names its
    container ID (what the monitor matches a GPU process's cgroup against)."""
    p = _with_status(UNLIMITED)
    p["spec"]["containers"][0]["env"] = [{"name": DISABLE_CONTROL_ENV, "value": "true"}]
    return p


def _with_status(spec: GpuPod) -> dict[str, Any]:
    """The pod with the container status that names its container ID."""
    p = gpu_pod(spec)
    name = p["spec"]["containers"][0]["name"]
    p["status"]["containerStatuses"] = [
        {
            "name": name,
            "containerID": f"containerd://{container_id(spec.namespace, spec.name, name)}",
            "image": p["spec"]["containers"][0]["image"],
            "ready": True,
            "restartCount": 0,
            "state": {"running": {}},
        }
    ]
    return p


def driver_limited_pod() -> dict[str, Any]:
    """``DRIVER_LIMITED``, Pending: it asks for a card whose memory the driver limits, which only
    driver-node has; its variables come from that node's Allocate, not from this spec."""
    p = DRIVER_LIMITED
    return pod(
        _container(p.mem_mib, p.cores),
        name=p.name,
        namespace=p.namespace,
        labels=dict(p.labels),
        annotations={ann.POD_MEMORY_ENFORCEMENT: ENFORCE_DRIVER},
        scheduler=SCHEDULER_NAME,
    )


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


def fragmented_pending_pod() -> dict[str, Any]:
    """An L4 with ``FRAG_REQUEST_MIB``: only fragmented-node has L4s, and none has that much free."""
    return pod(
        _container(FRAG_REQUEST_MIB, 0),
        name=FRAG_PENDING,
        namespace="scenarios",
        labels={"app": FRAG_PENDING},
        annotations={ann.POD_USE_GPUTYPE: "L4"},
        scheduler=SCHEDULER_NAME,
    )


def objects(gpus: int, now: datetime, scenarios: bool) -> list[dict[str, Any]]:
    """Every object of the simulated cluster, nodes first."""
    reported = format_handshake(Handshake(REPORTED, now))
    # the register annotation sim-node's plugin writes at start (deviceMemoryScaling with the scenarios)
    mem = int(GPU_MEM_MIB * MEMORY_SCALING) if scenarios else GPU_MEM_MIB
    out = [gpu_node(NODE, 0, gpus, reported, "a100", mem_mib=mem)]
    if scenarios:
        # the scheduler asked 20 minutes ago and no device plugin answered
        stale = format_requesting(now - timedelta(minutes=20))
        out.append(gpu_node(STALE_NODE, 1, 2, stale, "a100", allocatable=0))
        locked = gpu_node(LOCKED_NODE, 2, 1, format_handshake(Handshake(REPORTED, now)), "a100")
        crashed = NodeLock(now - timedelta(minutes=10), "scenarios", "crashed-bind")
        locked["metadata"]["annotations"][ann.NODE_LOCK] = format_node_lock(crashed)
        out.append(locked)
        frag, mem_mib, gpu_type = NODE_INDEX[FRAG_NODE], FRAG_GPU_MEM_MIB, FRAG_GPU_TYPE
        out.append(gpu_node(FRAG_NODE, frag, FRAG_GPUS, reported, "l4", mem_mib=mem_mib, gpu_type=gpu_type))
        # what driver-node's plugin registers at start (--memory-enforcement driver)
        driver = NODE_INDEX[DRIVER_NODE]
        out.append(gpu_node(DRIVER_NODE, driver, DRIVER_GPUS, reported, "a100", enforcement=ENFORCE_DRIVER))
    out += [gpu_pod(p) for p in POD_SPECS if p.gpu < gpus]
    if scenarios:
        out += [gpu_pod(OVERLIMIT), gpu_pod(IDLE), unlimited_pod(), pending_pod(), pinned_pod()]
        out += [driver_limited_pod()]
        out += [_with_status(SHIM_UNDERREPORTS)] if SHIM_UNDERREPORTS.gpu < gpus else []
        out += [gpu_pod(LEAKY)] if LEAKY.gpu < gpus else []
        out += [*(gpu_pod(p) for p in FRAG_PODS), fragmented_pending_pod()]
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
