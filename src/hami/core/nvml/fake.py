"""A faithful in-memory NVML: same calls, same errors, state a simulator can drive.

Behaves like the library where callers can tell: ``INVALID_ARGUMENT`` for a bad index,
``NOT_FOUND`` for an unknown UUID, ``UNINITIALIZED`` after ``close``, ``NOT_SUPPORTED`` for
calls a GPU lacks (``unsupported`` in the spec, MIG on a non-MIG GPU, unsupported event types),
``TIMEOUT`` from an empty event wait (reported as ``None``). Failures can be injected per call
and per device with ``fail``; Xids with ``inject_xid``, or from the spec's ``events`` schedule (a
thread raises them on time), which is how a fake held by another process is driven.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from hami.core.nvml.api import (
    CODE_NAMES,
    EVENT_XID_CRITICAL,
    NO_INSTANCE,
    TEMPERATURE_THRESHOLDS,
    TOPOLOGY_HOSTBRIDGE,
    TOPOLOGY_INTERNAL,
    TOPOLOGY_NODE,
    TOPOLOGY_SINGLE,
    TOPOLOGY_SYSTEM,
    GpuInstanceInfo,
    GpuInstanceProfile,
    MemoryInfo,
    MigDeviceInfo,
    NvLinkRemote,
    NvmlDevice,
    NvmlError,
    ProcessInfo,
    RemappedRows,
    RetiredPages,
    Utilization,
    XidEvent,
    mig_enabled,
)
from hami.core.nvml.fake_spec import FakeEvent, FakeGpu, FakeNode, load_spec

_MUTABLE = frozenset(f.name for f in fields(FakeGpu))
NVSWITCH_BUS_ID = "00000000:FF:00.0"  # where the fake's NVSwitch links end


@dataclass
class _Failure:
    call: str
    device: int | None
    code: int | str
    times: int | None  # None = until cleared


class FakeNvml:
    """``FakeNvml(spec)`` = ``nvmlInit`` on a node described by ``spec`` (dict or YAML path)."""

    def __init__(self, spec: dict[str, Any] | str | Path | FakeNode) -> None:
        self.node = spec if isinstance(spec, FakeNode) else load_spec(spec)
        # Simulators that change several fields at once hold this lock.
        self.lock = threading.RLock()
        self._failures: list[_Failure] = []
        self._event_sets: list[FakeEventSet] = []
        self.calls: dict[str, int] = {}
        self.created = 0  # compute instances created, for fresh MIG UUIDs as the driver gives
        self._open = False
        if self.node.init_error is not None:
            raise NvmlError("nvmlInit", self.node.init_error, "fake node without a usable driver")
        self._open = True
        self._closed = threading.Event()
        self._scheduler: threading.Thread | None = None
        if self.node.events:
            self._scheduler = threading.Thread(
                target=self._run_schedule, args=(self.node.events,), name="fake-nvml-events", daemon=True
            )
            self._scheduler.start()

    def _run_schedule(self, events: list[FakeEvent]) -> None:
        """Raise the spec's scheduled Xids on time until ``close``."""
        start = time.monotonic()
        due = [(start + e.after_seconds, i, e) for i, e in enumerate(events)]
        heapq.heapify(due)
        while due and not self._closed.wait(max(due[0][0] - time.monotonic(), 0.0)):
            at, i, event = heapq.heappop(due)
            self.inject_xid(event.device, event.xid)
            if event.every_seconds is not None:
                heapq.heappush(due, (at + event.every_seconds, i, event))

    # ---- test and simulator controls ----

    def fail(
        self, call: str, device: int | None = None, code: int | str = "UNKNOWN", times: int | None = None
    ) -> None:
        """Make ``call`` (an NVML function name) fail with ``code`` on ``device`` (None = every device),
        ``times`` times (None = until ``clear_failures``)."""
        if isinstance(code, str) and code not in CODE_NAMES:
            raise ValueError(f"unknown NVML return code {code!r}")
        with self.lock:
            self._failures.append(_Failure(call, device, code, times))

    def clear_failures(self) -> None:
        with self.lock:
            self._failures.clear()

    def update(self, index: int, **changes: Any) -> None:
        """Set fields of GPU ``index`` (``utilization_gpu=50, memory_used=...``), checked for sanity."""
        unknown = set(changes) - _MUTABLE
        if unknown:
            raise ValueError(f"unknown fake GPU fields: {sorted(unknown)}")
        with self.lock:
            gpu = self.node.gpus[index]
            candidate = replace(gpu, **changes)
            if not 0 <= candidate.memory_used <= candidate.memory_total:
                raise ValueError(f"memory_used {candidate.memory_used} outside [0, {candidate.memory_total}]")
            for pct in (candidate.utilization_gpu, candidate.utilization_memory):
                if not 0 <= pct <= 100:
                    raise ValueError(f"utilization {pct} outside [0, 100]")
            self.node.gpus[index] = candidate

    def set_processes(self, index: int, processes: list[tuple[int, int | None]]) -> None:
        self.update(index, processes=[ProcessInfo(pid, mem) for pid, mem in processes])

    def inject_event(
        self, index: int, event_type: int, data: int, gi: int = NO_INSTANCE, ci: int = NO_INSTANCE
    ) -> None:
        """Deliver an event from GPU ``index`` to every event set registered for that type on it."""
        with self.lock:
            uuid = self.node.gpus[index].uuid
            for es in self._event_sets:
                es._deliver(index, XidEvent(uuid, event_type, data, gi, ci))

    def inject_xid(self, index: int, xid: int, gi: int = NO_INSTANCE, ci: int = NO_INSTANCE) -> None:
        self.inject_event(index, EVENT_XID_CRITICAL, xid, gi, ci)

    # ---- the NVML surface ----

    def _call(self, call: str, device: int | None = None) -> None:
        """Count the call, then fail it as NVML would: uninitialised, unsupported, or injected."""
        with self.lock:
            self.calls[call] = self.calls.get(call, 0) + 1
            if not self._open:
                raise NvmlError(call, "UNINITIALIZED")
            if device is not None and self.node.gpus[device].lost:
                raise NvmlError(call, "GPU_IS_LOST")
            if device is not None and call in self.node.gpus[device].unsupported:
                raise NvmlError(call, "NOT_SUPPORTED")
            for f in self._failures:
                if f.call == call and (f.device is None or f.device == device):
                    if f.times is not None:
                        f.times -= 1
                        if f.times <= 0:
                            self._failures.remove(f)
                    raise NvmlError(call, f.code, "injected")

    def device_count(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.node.gpus)

    def device(self, index: int) -> FakeDevice:
        self._call("nvmlDeviceGetHandleByIndex", index if 0 <= index < len(self.node.gpus) else None)
        if not 0 <= index < len(self.node.gpus):
            raise NvmlError("nvmlDeviceGetHandleByIndex", "INVALID_ARGUMENT", f"index {index}")
        return FakeDevice(self, index)

    def device_by_uuid(self, uuid: str) -> FakeDevice:
        self._call("nvmlDeviceGetHandleByUUID")
        for i, gpu in enumerate(self.node.gpus):
            if gpu.uuid == uuid:
                if gpu.lost:
                    raise NvmlError("nvmlDeviceGetHandleByUUID", "GPU_IS_LOST", uuid)
                return FakeDevice(self, i)
        raise NvmlError("nvmlDeviceGetHandleByUUID", "NOT_FOUND", uuid)

    def driver_version(self) -> str:
        self._call("nvmlSystemGetDriverVersion")
        return self.node.driver_version

    def cuda_driver_version(self) -> int:
        self._call("nvmlSystemGetCudaDriverVersion")
        return self.node.cuda_driver_version

    def event_set(self) -> FakeEventSet:
        self._call("nvmlEventSetCreate")
        es = FakeEventSet(self)
        with self.lock:
            self._event_sets.append(es)
        return es

    def close(self) -> None:
        with self.lock:
            self._open = False
            for es in self._event_sets:
                es._wake()
        self._closed.set()
        if self._scheduler is not None and self._scheduler is not threading.current_thread():
            self._scheduler.join(5)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class FakeDevice:
    def __init__(self, nvml: FakeNvml, index: int) -> None:
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


class FakeEventSet:
    def __init__(self, nvml: FakeNvml) -> None:
        self._nvml = nvml
        self._masks: dict[int, int] = {}
        self._queue: deque[XidEvent] = deque()
        self._cond = threading.Condition(nvml.lock)
        self._closed = False

    def register(self, device: NvmlDevice, event_types: int) -> None:
        if not isinstance(device, FakeDevice) or device._nvml is not self._nvml:
            raise NvmlError(
                "nvmlDeviceRegisterEvents", "INVALID_ARGUMENT", "not a device of this NVML session"
            )
        self._nvml._call("nvmlDeviceRegisterEvents", device.index)
        with self._cond:
            supported = self._nvml.node.gpus[device.index].supported_events
            if event_types & ~supported:
                raise NvmlError("nvmlDeviceRegisterEvents", "NOT_SUPPORTED", f"mask {event_types:#x}")
            self._masks[device.index] = self._masks.get(device.index, 0) | event_types

    def _deliver(self, index: int, event: XidEvent) -> None:
        with self._cond:
            if not self._closed and self._masks.get(index, 0) & event.event_type:
                self._queue.append(event)
                self._cond.notify_all()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait(self, timeout_ms: int) -> XidEvent | None:
        """Block up to ``timeout_ms`` for an event; ``None`` is NVML's TIMEOUT."""
        self._nvml._call("nvmlEventSetWait")
        with self._cond:
            if self._closed:
                raise NvmlError("nvmlEventSetWait", "INVALID_ARGUMENT", "event set freed")
            self._cond.wait_for(
                lambda: bool(self._queue) or not self._nvml._open or self._closed, max(timeout_ms, 0) / 1000
            )
            if not self._nvml._open:
                raise NvmlError("nvmlEventSetWait", "UNINITIALIZED")
            return self._queue.popleft() if self._queue else None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
            if self in self._nvml._event_sets:
                self._nvml._event_sets.remove(self)
