"""NVML devices through ``pynvml``: one GPU's readings, topology, NVLink and MIG, on a shared session."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

from hami.core.nvml.api import (
    MEMORY_LIMIT_MAX,
    TEMPERATURE_THRESHOLDS,
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

T = TypeVar("T")

_MAX_PLACEMENTS = 32  # more than any card's placements or instances of one profile
# The compute-instance profile that spans a GPU instance of this many slices.
_CI_PROFILE_BY_SLICES = {
    1: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
    2: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
    3: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
    4: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
    6: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE,
    7: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
    8: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE,
}


def _code(exc: pynvml.NVMLError) -> int:
    return int(getattr(exc, "value", 999))


class _GetMemoryLimits(ctypes.Structure):
    """``nvmlGetMemoryLimits_v1_t`` as the NVML API reference documents it, for a binding without it."""

    _fields_ = [
        ("nameSpace", ctypes.c_char_p),
        ("softLimit", ctypes.c_ulonglong),
        ("hardLimit", ctypes.c_ulonglong),
        ("currentUsed", ctypes.c_ulonglong),
    ]


class _SetMemoryLimits(ctypes.Structure):
    """``nvmlSetMemoryLimits_v1_t``, likewise."""

    _fields_ = [
        ("nameSpace", ctypes.c_char_p),
        ("softLimit", ctypes.c_ulonglong),
        ("hardLimit", ctypes.c_ulonglong),
    ]


def _limits_call(name: str) -> Callable[[Any, Any], None]:
    """The binding's wrapper of ``name`` when it has one, else the library's symbol through ctypes
    (``FUNCTION_NOT_FOUND`` from a driver without it, either way)."""
    wrapper = getattr(pynvml, name, None)
    if wrapper is not None:
        return wrapper  # type: ignore[no-any-return]

    def call(handle: Any, limits: Any) -> None:
        fn = pynvml._nvmlGetFunctionPointer(name)
        pynvml._nvmlCheckReturn(fn(handle, ctypes.byref(limits)))

    return call


class _Session:
    """Guards every call: after ``close`` calls fail as NVML does when uninitialised."""

    def __init__(self) -> None:
        self.open = False
        self.lock = threading.Lock()

    def call(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        if not self.open:
            raise NvmlError(name, "UNINITIALIZED", "this NVML session is closed")
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            raise NvmlError(name, _code(exc), str(exc)) from None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RealDevice:
    def __init__(self, session: _Session, handle: Any, index: int) -> None:
        self._s = session
        self._h = handle
        self._index = index

    @property
    def index(self) -> int:
        return self._index

    @property
    def handle(self) -> Any:
        return self._h

    def uuid(self) -> str:
        return _text(self._s.call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, self._h))

    def name(self) -> str:
        return _text(self._s.call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, self._h))

    def memory_info(self) -> MemoryInfo:
        m = self._s.call("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, self._h)
        return MemoryInfo(total=int(m.total), free=int(m.free), used=int(m.used))

    def utilization_rates(self) -> Utilization:
        u = self._s.call("nvmlDeviceGetUtilizationRates", pynvml.nvmlDeviceGetUtilizationRates, self._h)
        return Utilization(gpu=int(u.gpu), memory=int(u.memory))

    def temperature(self) -> int:
        call = pynvml.nvmlDeviceGetTemperature
        return int(self._s.call("nvmlDeviceGetTemperature", call, self._h, pynvml.NVML_TEMPERATURE_GPU))

    def power_usage(self) -> int:
        return int(self._s.call("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage, self._h))

    def pci_bus_id(self) -> str:
        info = self._s.call("nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo, self._h)
        return _text(info.busId)

    def numa_node_id(self) -> int:
        return int(self._s.call("nvmlDeviceGetNumaNodeId", pynvml.nvmlDeviceGetNumaNodeId, self._h))

    def minor_number(self) -> int:
        return int(self._s.call("nvmlDeviceGetMinorNumber", pynvml.nvmlDeviceGetMinorNumber, self._h))

    def cuda_compute_capability(self) -> tuple[int, int]:
        call = pynvml.nvmlDeviceGetCudaComputeCapability
        major, minor = self._s.call("nvmlDeviceGetCudaComputeCapability", call, self._h)
        return int(major), int(minor)

    def compute_running_processes(self) -> list[ProcessInfo]:
        call = pynvml.nvmlDeviceGetComputeRunningProcesses
        procs = self._s.call("nvmlDeviceGetComputeRunningProcesses", call, self._h)
        return [ProcessInfo(pid=int(p.pid), used_memory=_bytes_or_none(p.usedGpuMemory)) for p in procs]

    def total_ecc_errors(self, uncorrected: bool, aggregate: bool = False) -> int:
        kind = (
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
            if uncorrected
            else pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
        )
        counter = pynvml.NVML_AGGREGATE_ECC if aggregate else pynvml.NVML_VOLATILE_ECC
        call = pynvml.nvmlDeviceGetTotalEccErrors
        return int(self._s.call("nvmlDeviceGetTotalEccErrors", call, self._h, kind, counter))

    def retired_pages(self) -> RetiredPages:
        call = pynvml.nvmlDeviceGetRetiredPages
        single = self._s.call(
            "nvmlDeviceGetRetiredPages",
            call,
            self._h,
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
        )
        double = self._s.call(
            "nvmlDeviceGetRetiredPages", call, self._h, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
        )
        pending = self._s.call(
            "nvmlDeviceGetRetiredPagesPendingStatus", pynvml.nvmlDeviceGetRetiredPagesPendingStatus, self._h
        )
        return RetiredPages(len(single), len(double), bool(pending))

    def remapped_rows(self) -> RemappedRows:
        call = pynvml.nvmlDeviceGetRemappedRows
        corr, unc, pending, failure = self._s.call("nvmlDeviceGetRemappedRows", call, self._h)
        return RemappedRows(int(corr), int(unc), bool(pending), bool(failure))

    def temperature_threshold(self, kind: str) -> int:
        call = pynvml.nvmlDeviceGetTemperatureThreshold
        kind_id = TEMPERATURE_THRESHOLDS[kind]
        return int(self._s.call("nvmlDeviceGetTemperatureThreshold", call, self._h, kind_id))

    def clock_event_reasons(self) -> int:
        call = pynvml.nvmlDeviceGetCurrentClocksEventReasons
        try:
            return int(self._s.call("nvmlDeviceGetCurrentClocksEventReasons", call, self._h))
        except NvmlError as exc:
            if exc.code != "FUNCTION_NOT_FOUND":
                raise
        # drivers before 535 know only the older name of the same call
        old = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(self._s.call("nvmlDeviceGetCurrentClocksEventReasons", old, self._h))

    def topology_common_ancestor(self, other: NvmlDevice) -> int:
        if not isinstance(other, RealDevice):
            raise NvmlError(
                "nvmlDeviceGetTopologyCommonAncestor", "INVALID_ARGUMENT", "not a device of this NVML session"
            )
        call = pynvml.nvmlDeviceGetTopologyCommonAncestor
        return int(self._s.call("nvmlDeviceGetTopologyCommonAncestor", call, self._h, other.handle))

    def nvlink_remotes(self) -> list[NvLinkRemote]:
        out = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            # past the card's last link, or a card without NVLink: skipped, as go-nvlib does
            state = self._link_call("nvmlDeviceGetNvLinkState", pynvml.nvmlDeviceGetNvLinkState, link)
            if state != pynvml.NVML_FEATURE_ENABLED:
                continue
            pci = self._link_call(
                "nvmlDeviceGetNvLinkRemotePciInfo", pynvml.nvmlDeviceGetNvLinkRemotePciInfo, link
            )
            if pci is None:
                continue
            kind = self._link_call(
                "nvmlDeviceGetNvLinkRemoteDeviceType", pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, link
            )
            out.append(NvLinkRemote(_text(pci.busId), kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH))
        return out

    def _link_call(self, name: str, fn: Callable[..., T], link: int) -> T | None:
        try:
            return self._s.call(name, fn, self._h, link)
        except NvmlError as exc:
            if exc.code in ("NOT_SUPPORTED", "INVALID_ARGUMENT"):
                return None
            raise

    def mig_mode(self) -> tuple[bool, bool]:
        current, pending = self._s.call("nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, self._h)
        return bool(current), bool(pending)

    def mig_devices(self) -> list[MigDeviceInfo]:
        if not mig_enabled(self):
            return []
        count = self._s.call("nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount, self._h)
        out = []
        for slot in range(int(count)):
            try:
                mig = self._s.call(
                    "nvmlDeviceGetMigDeviceHandleByIndex",
                    pynvml.nvmlDeviceGetMigDeviceHandleByIndex,
                    self._h,
                    slot,
                )
            except NvmlError as exc:
                if exc.code == "NOT_FOUND":  # an empty slot
                    continue
                raise
            dev = RealDevice(self._s, mig, slot)
            gi = self._s.call("nvmlDeviceGetGpuInstanceId", pynvml.nvmlDeviceGetGpuInstanceId, mig)
            ci = self._s.call("nvmlDeviceGetComputeInstanceId", pynvml.nvmlDeviceGetComputeInstanceId, mig)
            out.append(MigDeviceInfo(slot, dev.uuid(), dev.name(), int(gi), int(ci), dev.memory_info()))
        return out

    def gpu_instance_profiles(self) -> list[GpuInstanceProfile]:
        out = []
        for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                call = pynvml.nvmlDeviceGetGpuInstanceProfileInfo
                info = self._s.call("nvmlDeviceGetGpuInstanceProfileInfo", call, self._h, index)
            except NvmlError as exc:
                if exc.code in ("NOT_SUPPORTED", "INVALID_ARGUMENT"):  # not on this card
                    continue
                raise
            array = (pynvml.c_nvmlGpuInstancePlacement_t * _MAX_PLACEMENTS)()
            count = ctypes.c_uint(_MAX_PLACEMENTS)
            self._s.call(
                "nvmlDeviceGetGpuInstancePossiblePlacements",
                pynvml.nvmlDeviceGetGpuInstancePossiblePlacements,
                self._h,
                int(info.id),
                array,
                ctypes.byref(count),
            )
            out.append(
                GpuInstanceProfile(
                    id=int(info.id),
                    name=_text(info.name).removeprefix("MIG ").strip(),
                    slice_count=int(info.sliceCount),
                    memory_mib=int(info.memorySizeMB),
                    instance_count=int(info.instanceCount),
                    placements=tuple((int(p.start), int(p.size)) for p in array[: count.value]),
                )
            )
        return out

    def _gi(self, gpu_instance_id: int) -> Any:
        call = pynvml.nvmlDeviceGetGpuInstanceById
        return self._s.call("nvmlDeviceGetGpuInstanceById", call, self._h, gpu_instance_id)

    def _cis(self, gi: Any) -> list[Any]:
        out = []
        for index in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                info = self._s.call(
                    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                    pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo,
                    gi,
                    index,
                    pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                )
            except NvmlError as exc:
                if exc.code in ("NOT_SUPPORTED", "INVALID_ARGUMENT"):
                    continue
                raise
            array = (pynvml.c_nvmlComputeInstance_t * _MAX_PLACEMENTS)()
            count = ctypes.c_uint(0)
            self._s.call(
                "nvmlGpuInstanceGetComputeInstances",
                pynvml.nvmlGpuInstanceGetComputeInstances,
                gi,
                int(info.id),
                array,
                ctypes.byref(count),
            )
            out += list(array[: count.value])
        return out

    def gpu_instances(self) -> list[GpuInstanceInfo]:
        out = []
        for profile in self.gpu_instance_profiles():
            array = (pynvml.c_nvmlGpuInstance_t * _MAX_PLACEMENTS)()
            count = ctypes.c_uint(0)
            call = pynvml.nvmlDeviceGetGpuInstances
            self._s.call("nvmlDeviceGetGpuInstances", call, self._h, profile.id, array, ctypes.byref(count))
            for gi in array[: count.value]:
                info = self._s.call("nvmlGpuInstanceGetInfo", pynvml.nvmlGpuInstanceGetInfo, gi)
                cis = tuple(
                    int(self._s.call("nvmlComputeInstanceGetInfo", pynvml.nvmlComputeInstanceGetInfo, ci).id)
                    for ci in self._cis(gi)
                )
                start, size = int(info.placement.start), int(info.placement.size)
                out.append(GpuInstanceInfo(int(info.id), int(info.profileId), start, size, cis))
        return out

    def create_gpu_instance(self, profile_id: int, start: int, size: int) -> int:
        placement = pynvml.c_nvmlGpuInstancePlacement_t(start, size)
        call = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement
        gi = self._s.call("nvmlDeviceCreateGpuInstanceWithPlacement", call, self._h, profile_id, placement)
        return int(self._s.call("nvmlGpuInstanceGetInfo", pynvml.nvmlGpuInstanceGetInfo, gi).id)

    def create_compute_instance(self, gpu_instance_id: int) -> int:
        gi = self._gi(gpu_instance_id)
        info = self._s.call("nvmlGpuInstanceGetInfo", pynvml.nvmlGpuInstanceGetInfo, gi)
        slices = next(p.slice_count for p in self.gpu_instance_profiles() if p.id == int(info.profileId))
        profile = self._s.call(
            "nvmlGpuInstanceGetComputeInstanceProfileInfo",
            pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo,
            gi,
            _CI_PROFILE_BY_SLICES[slices],
            pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
        )
        call = pynvml.nvmlGpuInstanceCreateComputeInstance
        ci = self._s.call("nvmlGpuInstanceCreateComputeInstance", call, gi, int(profile.id))
        return int(self._s.call("nvmlComputeInstanceGetInfo", pynvml.nvmlComputeInstanceGetInfo, ci).id)

    def destroy_compute_instance(self, gpu_instance_id: int, compute_instance_id: int) -> None:
        call = pynvml.nvmlGpuInstanceGetComputeInstanceById
        gi = self._gi(gpu_instance_id)
        ci = self._s.call("nvmlGpuInstanceGetComputeInstanceById", call, gi, compute_instance_id)
        self._s.call("nvmlComputeInstanceDestroy", pynvml.nvmlComputeInstanceDestroy, ci)

    def destroy_gpu_instance(self, gpu_instance_id: int) -> None:
        self._s.call("nvmlGpuInstanceDestroy", pynvml.nvmlGpuInstanceDestroy, self._gi(gpu_instance_id))

    def supported_event_types(self) -> int:
        call = pynvml.nvmlDeviceGetSupportedEventTypes
        return int(self._s.call("nvmlDeviceGetSupportedEventTypes", call, self._h))

    def memory_limits(self, cgroup: str) -> MemoryLimits:
        name = "nvmlDeviceGetMemoryLimits_v1"
        limits = getattr(pynvml, "c_nvmlGetMemoryLimits_v1_t", _GetMemoryLimits)()
        limits.nameSpace = cgroup.encode()
        self._s.call(name, _limits_call(name), self._h, limits)
        return MemoryLimits(int(limits.softLimit), int(limits.hardLimit), int(limits.currentUsed))

    def set_memory_limits(self, cgroup: str, soft: int, hard: int) -> None:
        name = "nvmlDeviceSetMemoryLimits_v1"
        if not 0 <= soft <= hard <= MEMORY_LIMIT_MAX:
            raise NvmlError(name, "INVALID_ARGUMENT", f"soft {soft} hard {hard}")
        limits = getattr(pynvml, "c_nvmlSetMemoryLimits_v1_t", _SetMemoryLimits)()
        limits.nameSpace = cgroup.encode()
        limits.softLimit, limits.hardLimit = soft, hard
        self._s.call(name, _limits_call(name), self._h, limits)


def _bytes_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
