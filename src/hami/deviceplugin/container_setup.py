"""Allocate as data: error reasons, container selection, env vars and mounts (§C.7,
docs/guides/device-plugin-debugging.md §4.4).

Nothing here touches the API server or the filesystem; the servicer feeds it the pending pod's decoded
annotation and the facts about the host it needs (whether a versioned libvgpu or a license exists).

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hami.core.devices import ENFORCE_DRIVER, MODE_MIG, ContainerDevice, ContainerDevices, PodDevices
from hami.core.hamicore import CONTAINER_LOCK_DIR, HostLayout, control_disabled
from hami.deviceplugin.cdi import ANNOTATION_PREFIX, ENVVAR, device_list_edits
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.inventory import physical_device_id
from hami.deviceplugin.migplan import REASONS as MIG_REASONS

# Reason codes of hami_deviceplugin_allocate_errors_total (metrics contract,
# docs/guides/device-plugin-debugging.md §4.4).
DEVICE_NUMBER_MISMATCH = "device_number_mismatch"
UNKNOWN_DEVICE = "unknown_device"
REQUEST_TOO_LARGE = "request_too_large"
PENDING_POD_NOT_FOUND = "pending_pod_not_found"
DECODE_FAILED = "decode_failed"
# Not in the table of docs/guides/device-plugin-debugging.md §4.4: the API server refused the pod patch that
# records the allocation, the per-container cache directory could not be prepared on the host, or
# the annotation asks for limits no container may get (negative memory, cores outside 0..100).
POD_UPDATE_FAILED = "pod_update_failed"
HOST_PREPARE_FAILED = "host_prepare_failed"
INVALID_LIMITS = "invalid_limits"
REASONS = (
    DEVICE_NUMBER_MISMATCH,
    UNKNOWN_DEVICE,
    REQUEST_TOO_LARGE,
    PENDING_POD_NOT_FOUND,
    DECODE_FAILED,
    POD_UPDATE_FAILED,
    HOST_PREPARE_FAILED,
    INVALID_LIMITS,
    *MIG_REASONS,
)

VENDOR_KEYWORD = "NVIDIA"


class AllocateError(Exception):
    """An Allocate failure: ``str()`` is the gRPC error text, ``reason`` the metric label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def pending_pod_error(cause: str) -> AllocateError:
    # The grep target of docs/guides/device-plugin-debugging.md §4.4, followed by HAMi's own GetPendingPod
    # text.
    return AllocateError(PENDING_POD_NOT_FOUND, f"failed to get pending pod: {cause}")


def decode_error(cause: str) -> AllocateError:
    return AllocateError(DECODE_FAILED, f"failed to decode pod devices: {cause}")


def check_kubelet_ids(ids: Sequence[str], known: frozenset[str], cfg: PluginConfig) -> None:
    """The kubelet-side checks: MIG request size, then that every requested ID is one we advertise."""
    res = cfg.resource_name
    annotated = any("::" in i for i in ids)
    if ids and "MIG" in ids[0] and cfg.fail_requests_greater_than_one and annotated and len(ids) > 1:
        raise AllocateError(
            REQUEST_TOO_LARGE,
            f"request for '{res}: {len(ids)}' too large: maximum request size for shared resources is 1",
        )
    for device_id in ids:
        if device_id not in known:
            raise AllocateError(
                UNKNOWN_DEVICE, f"invalid allocation request for '{res}': unknown device: {device_id}"
            )


def check_annotated_devices(devreq: ContainerDevices, gpus: Mapping[str, GpuRef]) -> None:
    """What the pod annotation asks for must exist here and be sane before it reaches a container.

    HAMi copies the annotation's UUIDs into ``NVIDIA_VISIBLE_DEVICES`` and its limits into
    HAMi-core's environment as they are; anyone who can write the pod's annotations could then name
    a GPU that is not on this node or a negative limit. A MIG entry names its parent GPU before
    ``[``.
    """
    for dev in devreq:
        if dev.uuid.split("[", 1)[0] not in gpus:
            raise AllocateError(
                UNKNOWN_DEVICE, f"device {dev.uuid} in the pod annotation is not on this node"
            )
        if dev.usedmem < 0 or not 0 <= dev.usedcores <= 100:
            raise AllocateError(
                INVALID_LIMITS,
                f"device {dev.uuid}: memory {dev.usedmem} MiB and cores {dev.usedcores} % are not valid "
                "limits (memory at least 0, cores 0..100)",
            )


def is_mig_request(ids: Sequence[str]) -> bool:
    return bool(ids) and "MIG" in ids[0]


def pop_next_container(pod_devices: PodDevices) -> tuple[int, ContainerDevices, PodDevices]:
    """The first non-empty container entry (init containers first) and the devices with it erased."""
    for idx, ctr in enumerate(pod_devices):
        if ctr:
            rest = (*pod_devices[:idx], (), *pod_devices[idx + 1 :])
            return idx, ctr, rest
    raise AllocateError(DEVICE_NUMBER_MISMATCH, "no pending device allocation found")


def container_of(pod: Mapping[str, Any], idx: int) -> Mapping[str, Any]:
    """The container spec at annotation position ``idx`` (init containers, then regular ones)."""
    spec = pod.get("spec") or {}
    inits = spec.get("initContainers") or []
    regular = spec.get("containers") or []
    if idx < len(inits):
        return dict(inits[idx])
    if idx - len(inits) < len(regular):
        return dict(regular[idx - len(inits)])
    raise decode_error(f"container index {idx} out of range (init={len(inits)}, regular={len(regular)})")


def check_count(devreq: ContainerDevices, ids: Sequence[str]) -> None:
    if len(devreq) != len(ids):
        raise AllocateError(DEVICE_NUMBER_MISMATCH, "device number not matched")


def align_to_kubelet(devreq: ContainerDevices, ids: Sequence[str]) -> ContainerDevices:
    """With preferred allocation on, the kubelet's replica IDs name the physical GPUs."""
    return tuple(
        ContainerDevice(physical_device_id(i), d.type, d.usedmem, d.usedcores)
        for d, i in zip(devreq, ids, strict=True)
    )


def has_pending_devices(annotation: str) -> bool:
    """HAMi's test: the to-allocate string still names the vendor, so more containers will come."""
    return VENDOR_KEYWORD in annotation


@dataclass(frozen=True)
class MountSpec:
    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True)
class DeviceNode:
    container_path: str
    host_path: str
    permissions: str


@dataclass(frozen=True)
class RuntimeOptions:
    """NVIDIA plugin flags that shape every response (§C.1; §C.7 step 5)."""

    id_strategy: str = "uuid"  # or "index"
    pass_device_specs: bool = False
    dev_root: str = "/"
    gdrcopy: bool = False
    gds: bool = False
    mofed: bool = False
    imex_channel_ids: tuple[int, ...] = ()
    list_strategies: tuple[str, ...] = (ENVVAR,)  # --device-list-strategy
    cdi_annotation_prefix: str = ANNOTATION_PREFIX


@dataclass(frozen=True)
class GpuRef:
    index: int
    minor: int


@dataclass(frozen=True)
class ContainerAllocation:
    envs: dict[str, str]
    mounts: tuple[MountSpec, ...]
    cache_dir: str | None  # to prepare on the host; None in MIG mode
    devices: tuple[DeviceNode, ...] = ()
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()


def base_response(
    uuids: Sequence[str], opts: RuntimeOptions, gpus: Mapping[str, GpuRef], response_id: str = ""
) -> ContainerAllocation:
    """NVIDIA's part of the response: the device list by ``--device-list-strategy``, feature envs,
    optional device nodes. ``response_id`` names the CDI annotation (one per container response)."""
    unique = list(dict.fromkeys(uuids))
    by_index = opts.id_strategy == "index"
    ids = [str(gpus[u].index) for u in unique if u in gpus] if by_index else unique
    edits = device_list_edits(
        opts.list_strategies, ids, opts.imex_channel_ids, response_id or "0", opts.cdi_annotation_prefix
    )
    envs = dict(edits.envs)
    if opts.imex_channel_ids:
        envs["NVIDIA_IMEX_CHANNELS"] = ",".join(str(c) for c in opts.imex_channel_ids)
    for flag, name in (
        (opts.gdrcopy, "NVIDIA_GDRCOPY"),
        (opts.gds, "NVIDIA_GDS"),
        (opts.mofed, "NVIDIA_MOFED"),
    ):
        if flag:
            envs[name] = "enabled"
    nodes: tuple[DeviceNode, ...] = ()
    if opts.pass_device_specs:
        root = opts.dev_root.rstrip("/")
        nodes = tuple(
            DeviceNode(f"/dev/nvidia{gpus[u].minor}", f"{root}/dev/nvidia{gpus[u].minor}", "rw")
            for u in unique
            if u in gpus
        )
    mounts = tuple(MountSpec(c, h, True) for c, h in edits.mounts)
    return ContainerAllocation(envs, mounts, None, nodes, edits.annotations, edits.cdi_devices)


def build_container_allocation(
    devreq: ContainerDevices,
    cfg: PluginConfig,
    layout: HostLayout,
    *,
    pod_uid: str,
    container: Mapping[str, Any],
    cache_id: str,
    lib_host_path: str,
    license_present: bool,
    opts: RuntimeOptions | None = None,
    gpus: Mapping[str, GpuRef] | None = None,
) -> ContainerAllocation:
    """The env vars, mounts and device nodes of §C.7 for one container, in HAMi's order."""
    base = base_response([d.uuid for d in devreq], opts or RuntimeOptions(), gpus or {}, cache_id)
    if cfg.operating_mode == MODE_MIG:
        return base
    envs = base.envs
    if cfg.memory_enforcement == ENFORCE_DRIVER:
        envs.update(driver_memory_envs(devreq))
    else:
        for i, dev in enumerate(devreq):
            envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{dev.usedmem}m"
    envs["CUDA_DEVICE_SM_LIMIT"] = str(devreq[0].usedcores)  # the first device only, as HAMi
    envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = f"{layout.vgpu_dir}/{cache_id}.cache"
    if cfg.device_memory_scaling > 1:
        envs["CUDA_OVERSUBSCRIBE"] = "true"
    if cfg.lib_cuda_log_level:
        envs["LIBCUDA_LOG_LEVEL"] = cfg.lib_cuda_log_level
    if cfg.disable_core_limit:
        envs["GPU_CORE_UTILIZATION_POLICY"] = "disable"
    cache_dir = layout.cache_dir(pod_uid, str(container.get("name", "")))
    mounts = [
        *base.mounts,
        MountSpec(f"{layout.vgpu_dir}/libvgpu.so", lib_host_path, True),
        MountSpec(layout.vgpu_dir, cache_dir, False),
        MountSpec(CONTAINER_LOCK_DIR, layout.lock_dir, False),
    ]
    if not control_disabled(container):
        mounts.append(MountSpec("/etc/ld.so.preload", layout.preload_path, True))
    if license_present:
        mounts.append(MountSpec("/tmp/license", layout.license_path, True))
        mounts.append(MountSpec("/usr/bin/vgpuvalidator", f"{layout.vgpu_dir}/vgpuvalidator", True))
    return replace(base, mounts=tuple(mounts), cache_dir=cache_dir)


def driver_memory_envs(devreq: ContainerDevices) -> dict[str, str]:
    """``NVIDIA_GPU_MEMORY_LIMIT`` and ``NVIDIA_GPU_MEMORY_REQUEST`` for the container toolkit's hook
    (§C.11): one value in whole MiB for every GPU of the container. HAMi gives a container the same
    memory on each of its GPUs unless it asks in percent of differing cards; then the smallest is the
    only one that holds on every card. A container without a memory figure (whole cards) gets
    neither."""
    mem = min((d.usedmem for d in devreq if d.usedmem > 0), default=0)
    if mem <= 0:
        return {}
    # REQUEST equals LIMIT: a pod declares one figure (nvidia.com/gpumem, an extended resource, whose
    # request Kubernetes makes equal to its limit) and the scheduler reserves exactly that on the card,
    # so the reservation is both what the container is guaranteed and the most it may use.
    return {"NVIDIA_GPU_MEMORY_LIMIT": str(mem), "NVIDIA_GPU_MEMORY_REQUEST": str(mem)}


@dataclass(frozen=True)
class PreferredRequest:
    available: tuple[str, ...]
    must_include: tuple[str, ...]
    size: int


def preferred_allocation(
    pod_devices: PodDevices, requests: Sequence[PreferredRequest]
) -> list[list[str] | None]:
    """Replica IDs on the GPUs the scheduler chose, per request; None where no choice fits (omitted)."""
    lists = [c for c in pod_devices if c]
    out: list[list[str] | None] = []
    for k, req in enumerate(requests):
        if k >= len(lists):
            out.append(None)
            continue
        chosen: list[str] = []
        pool = list(req.must_include) + [a for a in req.available if a not in req.must_include]
        for dev in lists[k][: req.size]:
            pick = next((i for i in pool if i not in chosen and physical_device_id(i) == dev.uuid), None)
            if pick is None:
                break
            chosen.append(pick)
        out.append(chosen if len(chosen) == min(req.size, len(lists[k])) and chosen else None)
    return out
