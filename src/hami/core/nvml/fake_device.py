"""The fake NVML's devices: one GPU of a ``FakeNvml`` node, its readings, topology, NVLink and MIG."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Protocol

from hami.core.nvml.api import (
    MEMORY_LIMIT_MAX,
    TEMPERATURE_THRESHOLDS,
    TOPOLOGY_HOSTBRIDGE,
    TOPOLOGY_INTERNAL,
    TOPOLOGY_NODE,
    TOPOLOGY_SINGLE,
    TOPOLOGY_SYSTEM,
    GpuInstanceInfo,
    GpuInstanceProfile,
    MemoryInfo,
    MemoryLimits,
    MigDeviceInfo,
    NvLinkRemote,
    NvmlDevice,
    NvmlError,
    ProcessInfo,
    RemappedRows,
    RetiredPages,
    Utilization,
    mig_enabled,
)
from hami.core.nvml.fake_spec import FakeGpu, FakeNode


class DeviceHost(Protocol):
    """What a device needs of the ``FakeNvml`` that holds it (declared here, so the two modules do
    not import each other)."""

    node: FakeNode
    lock: threading.RLock
    created: int  # compute instances created, for fresh MIG UUIDs

    def _call(self, call: str, device: int | None = None) -> None: ...


NVSWITCH_BUS_ID = "00000000:FF:00.0"  # where the fake's NVSwitch links end


class FakeDevice:
    def __init__(self, nvml: DeviceHost, index: int) -> None:
        self._nvml = nvml
        self._index = index

    @property
    def index(self) -> int:
        return self._index

    def _gpu(self, call: str) -> FakeGpu:
        self._nvml._call(call, self._index)
        return self._nvml.node.gpus[self._index]

    def uuid(self) -> str:
        return self._gpu("nvmlDeviceGetUUID").uuid

    def name(self) -> str:
        return self._gpu("nvmlDeviceGetName").name

    def memory_info(self) -> MemoryInfo:
        return self._gpu("nvmlDeviceGetMemoryInfo").memory()

    def utilization_rates(self) -> Utilization:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates")
        return Utilization(gpu=gpu.utilization_gpu, memory=gpu.utilization_memory)

    def temperature(self) -> int:
        return self._gpu("nvmlDeviceGetTemperature").temperature

    def power_usage(self) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage").power_mw

    def pci_bus_id(self) -> str:
        return self._gpu("nvmlDeviceGetPciInfo").pci_bus_id

    def numa_node_id(self) -> int:
        return self._gpu("nvmlDeviceGetNumaNodeId").numa

    def minor_number(self) -> int:
        return self._gpu("nvmlDeviceGetMinorNumber").minor

    def cuda_compute_capability(self) -> tuple[int, int]:
        return self._gpu("nvmlDeviceGetCudaComputeCapability").compute_capability

    def compute_running_processes(self) -> list[ProcessInfo]:
        return list(self._gpu("nvmlDeviceGetComputeRunningProcesses").processes)

    def total_ecc_errors(self, uncorrected: bool, aggregate: bool = False) -> int:
        # The fake keeps one counter per kind: volatile and aggregate agree until a driver reload.
        gpu = self._gpu("nvmlDeviceGetTotalEccErrors")
        return gpu.ecc_uncorrected if uncorrected else gpu.ecc_corrected

    def retired_pages(self) -> RetiredPages:
        gpu = self._gpu("nvmlDeviceGetRetiredPages")
        self._nvml._call("nvmlDeviceGetRetiredPagesPendingStatus", self._index)
        return RetiredPages(gpu.retired_single_bit, gpu.retired_double_bit, gpu.retired_pending)

    def remapped_rows(self) -> RemappedRows:
        gpu = self._gpu("nvmlDeviceGetRemappedRows")
        return RemappedRows(
            gpu.remapped_correctable, gpu.remapped_uncorrectable, gpu.remap_pending, gpu.remap_failure
        )

    def temperature_threshold(self, kind: str) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperatureThreshold")
        if kind not in TEMPERATURE_THRESHOLDS:
            raise NvmlError("nvmlDeviceGetTemperatureThreshold", "INVALID_ARGUMENT", kind)
        return gpu.temperature_slowdown if kind == "slowdown" else gpu.temperature_shutdown

    def clock_event_reasons(self) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksEventReasons").clock_event_reasons

    def topology_common_ancestor(self, other: NvmlDevice) -> int:
        gpu = self._gpu("nvmlDeviceGetTopologyCommonAncestor")
        if not isinstance(other, FakeDevice) or other._nvml is not self._nvml:
            raise NvmlError(
                "nvmlDeviceGetTopologyCommonAncestor", "INVALID_ARGUMENT", "not a device of this NVML session"
            )
        peer = self._nvml.node.gpus[other.index]
        for level, mine, theirs in (
            (TOPOLOGY_INTERNAL, gpu.pcie_board, peer.pcie_board),
            (TOPOLOGY_SINGLE, gpu.pcie_switch, peer.pcie_switch),
            (TOPOLOGY_HOSTBRIDGE, gpu.pcie_host_bridge, peer.pcie_host_bridge),
        ):
            if mine and mine == theirs:
                return level
        return TOPOLOGY_NODE if gpu.numa == peer.numa else TOPOLOGY_SYSTEM

    def nvlink_remotes(self) -> list[NvLinkRemote]:
        gpu = self._gpu("nvmlDeviceGetNvLinkState")
        remotes = [
            NvLinkRemote(self._nvml.node.gpus[peer].pci_bus_id, switch=False)
            for peer, count in sorted(gpu.nvlinks.items())
            for _ in range(count)
        ]
        remotes += [NvLinkRemote(NVSWITCH_BUS_ID, switch=True)] * gpu.nvswitch_links
        for _ in remotes:  # one remote PCI info and one remote type per active link, as on hardware
            self._nvml._call("nvmlDeviceGetNvLinkRemotePciInfo", self._index)
            self._nvml._call("nvmlDeviceGetNvLinkRemoteDeviceType", self._index)
        return remotes

    def mig_mode(self) -> tuple[bool, bool]:
        gpu = self._gpu("nvmlDeviceGetMigMode")
        if not gpu.mig_capable:
            raise NvmlError("nvmlDeviceGetMigMode", "NOT_SUPPORTED")
        return gpu.mig_enabled, gpu.mig_enabled

    def mig_devices(self) -> list[MigDeviceInfo]:
        if not mig_enabled(self):
            return []
        gpu = self._gpu("nvmlDeviceGetMaxMigDeviceCount")
        out = []
        for mig in gpu.mig_instances:
            for call in (
                "nvmlDeviceGetMigDeviceHandleByIndex",
                "nvmlDeviceGetUUID",
                "nvmlDeviceGetName",
                "nvmlDeviceGetGpuInstanceId",
                "nvmlDeviceGetComputeInstanceId",
                "nvmlDeviceGetMemoryInfo",
            ):
                self._nvml._call(call, self._index)
            out.append(mig)
        return out

    def _mig_gpu(self, call: str) -> FakeGpu:
        gpu = self._gpu(call)
        if not (gpu.mig_capable and gpu.mig_enabled):
            raise NvmlError(call, "NOT_SUPPORTED", "MIG mode is off")
        return gpu

    def gpu_instance_profiles(self) -> list[GpuInstanceProfile]:
        gpu = self._mig_gpu("nvmlDeviceGetGpuInstanceProfileInfo")
        self._nvml._call("nvmlDeviceGetGpuInstancePossiblePlacements", self._index)
        return list(gpu.mig_profiles)

    def gpu_instances(self) -> list[GpuInstanceInfo]:
        gpu = self._mig_gpu("nvmlDeviceGetGpuInstances")
        with self._nvml.lock:
            return [
                GpuInstanceInfo(
                    gi,
                    profile,
                    start,
                    size,
                    tuple(m.compute_instance_id for m in gpu.mig_instances if m.gpu_instance_id == gi),
                )
                for gi, (profile, start, size) in sorted(gpu.mig_gpu_instances.items())
            ]

    def create_gpu_instance(self, profile_id: int, start: int, size: int) -> int:
        call = "nvmlDeviceCreateGpuInstanceWithPlacement"
        gpu = self._mig_gpu(call)
        with self._nvml.lock:
            profile = next((p for p in gpu.mig_profiles if p.id == profile_id), None)
            if profile is None or (start, size) not in profile.placements:
                raise NvmlError(call, "INVALID_ARGUMENT", f"profile {profile_id} placement {start}+{size}")
            for _, used_start, used_size in gpu.mig_gpu_instances.values():
                if start < used_start + used_size and used_start < start + size:
                    raise NvmlError(call, "INSUFFICIENT_RESOURCES", f"slices {start}+{size} are in use")
            gi = 1 + max(gpu.mig_gpu_instances, default=0)
            gpu.mig_gpu_instances[gi] = (profile_id, start, size)
            return gi

    def create_compute_instance(self, gpu_instance_id: int) -> int:
        call = "nvmlGpuInstanceCreateComputeInstance"
        gpu = self._mig_gpu(call)
        with self._nvml.lock:
            placed = gpu.mig_gpu_instances.get(gpu_instance_id)
            if placed is None:
                raise NvmlError(call, "NOT_FOUND", f"GPU instance {gpu_instance_id}")
            if any(m.gpu_instance_id == gpu_instance_id for m in gpu.mig_instances):
                raise NvmlError(call, "INSUFFICIENT_RESOURCES", "a compute instance spans the GPU instance")
            profile = next(p for p in gpu.mig_profiles if p.id == placed[0])
            self._nvml.created += 1
            mem = profile.memory_mib << 20
            gpu.mig_instances.append(
                MigDeviceInfo(
                    index=len(gpu.mig_instances),
                    uuid=f"MIG-{self._index:04x}{gpu_instance_id:04x}-0000-4000-8000-{self._nvml.created:012x}",
                    name=f"{gpu.name} MIG {profile.name}",
                    gpu_instance_id=gpu_instance_id,
                    compute_instance_id=0,
                    memory=MemoryInfo(total=mem, free=mem, used=0),
                )
            )
            return 0

    def destroy_compute_instance(self, gpu_instance_id: int, compute_instance_id: int) -> None:
        call = "nvmlComputeInstanceDestroy"
        gpu = self._mig_gpu(call)
        with self._nvml.lock:
            keep = [
                m
                for m in gpu.mig_instances
                if (m.gpu_instance_id, m.compute_instance_id) != (gpu_instance_id, compute_instance_id)
            ]
            if len(keep) == len(gpu.mig_instances):
                where = f"{gpu_instance_id}/{compute_instance_id}"
                raise NvmlError(call, "NOT_FOUND", f"compute instance {where}")
            gpu.mig_instances[:] = [replace(m, index=j) for j, m in enumerate(keep)]

    def destroy_gpu_instance(self, gpu_instance_id: int) -> None:
        call = "nvmlGpuInstanceDestroy"
        gpu = self._mig_gpu(call)
        with self._nvml.lock:
            if gpu_instance_id not in gpu.mig_gpu_instances:
                raise NvmlError(call, "NOT_FOUND", f"GPU instance {gpu_instance_id}")
            if any(m.gpu_instance_id == gpu_instance_id for m in gpu.mig_instances):
                raise NvmlError(call, "IN_USE", "destroy its compute instances first")
            del gpu.mig_gpu_instances[gpu_instance_id]

    def supported_event_types(self) -> int:
        return self._gpu("nvmlDeviceGetSupportedEventTypes").supported_events

    def _cgroup_gpu(self, call: str, cgroup: str) -> FakeGpu:
        """The GPU, once the call passes the driver's checks: the call exists, the handle is no MIG one
        (nor a GPU in MIG mode, whose memory belongs to its instances), the cgroup exists."""
        if not self._nvml.node.memory_limits:
            self._nvml._call(call, self._index)
            raise NvmlError(call, "FUNCTION_NOT_FOUND", "the driver predates per-cgroup memory limits")
        gpu = self._gpu(call)
        if gpu.mig_enabled:
            raise NvmlError(call, "NOT_SUPPORTED", "MIG handles are not supported")
        if not cgroup.startswith("/"):
            raise NvmlError(call, "INVALID_ARGUMENT", f"not a full sysfs path: {cgroup!r}")
        if cgroup not in self._nvml.node.cgroups:
            raise NvmlError(call, "NOT_FOUND", cgroup)
        return gpu

    def memory_limits(self, cgroup: str) -> MemoryLimits:
        gpu = self._cgroup_gpu("nvmlDeviceGetMemoryLimits_v1", cgroup)
        with self._nvml.lock:
            soft, hard, used = gpu.cgroup_memory.get(cgroup, (0, MEMORY_LIMIT_MAX, 0))
        return MemoryLimits(soft=soft, hard=hard, used=used)

    def set_memory_limits(self, cgroup: str, soft: int, hard: int) -> None:
        call = "nvmlDeviceSetMemoryLimits_v1"
        gpu = self._cgroup_gpu(call, cgroup)
        if not 0 <= soft <= hard <= MEMORY_LIMIT_MAX:
            raise NvmlError(call, "INVALID_ARGUMENT", f"soft {soft} hard {hard}")
        with self._nvml.lock:
            used = gpu.cgroup_memory.get(cgroup, [0, 0, 0])[2]
            gpu.cgroup_memory[cgroup] = [soft, hard, used]
