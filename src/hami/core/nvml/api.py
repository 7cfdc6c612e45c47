"""The NVML interface both backends implement, its data types and its one error type."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self

# NVML return codes (nvml.h), by name, so errors compare the same on every backend.
RETURN_CODES: dict[int, str] = {
    1: "UNINITIALIZED",
    2: "INVALID_ARGUMENT",
    3: "NOT_SUPPORTED",
    4: "NO_PERMISSION",
    5: "ALREADY_INITIALIZED",
    6: "NOT_FOUND",
    7: "INSUFFICIENT_SIZE",
    8: "INSUFFICIENT_POWER",
    9: "DRIVER_NOT_LOADED",
    10: "TIMEOUT",
    11: "IRQ_ISSUE",
    12: "LIBRARY_NOT_FOUND",
    13: "FUNCTION_NOT_FOUND",
    14: "CORRUPTED_INFOROM",
    15: "GPU_IS_LOST",
    16: "RESET_REQUIRED",
    17: "OPERATING_SYSTEM",
    18: "LIB_RM_VERSION_MISMATCH",
    19: "IN_USE",
    20: "MEMORY",
    21: "NO_DATA",
    22: "VGPU_ECC_NOT_SUPPORTED",
    23: "INSUFFICIENT_RESOURCES",
    24: "FREQ_NOT_SUPPORTED",
    25: "ARGUMENT_VERSION_MISMATCH",
    26: "DEPRECATED",
    27: "NOT_READY",
    28: "GPU_NOT_FOUND",
    29: "INVALID_STATE",
    999: "UNKNOWN",
}
CODE_NAMES = frozenset(RETURN_CODES.values())

# nvmlEventType* bits.
EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_PSTATE = 0x4
EVENT_XID_CRITICAL = 0x8
# HAMi's health checker registers these, masked by nvmlDeviceGetSupportedEventTypes.
HEALTH_EVENTS = EVENT_XID_CRITICAL | EVENT_DOUBLE_BIT_ECC | EVENT_SINGLE_BIT_ECC
# GPU/compute instance id in an event that is not tied to a MIG instance.
NO_INSTANCE = 0xFFFFFFFF

# nvmlClocksEventReason* bits (formerly "throttle reasons"), by the name the metrics use.
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# nvmlGpuTopologyLevel_t: the closest common PCIe ancestor of two GPUs, nearest first.
TOPOLOGY_INTERNAL = 0  # the same board (a dual-GPU card)
TOPOLOGY_SINGLE = 10  # one PCIe switch
TOPOLOGY_MULTIPLE = 20  # several PCIe switches, no host bridge
TOPOLOGY_HOSTBRIDGE = 30  # one host bridge
TOPOLOGY_NODE = 40  # the same NUMA node (formerly TOPOLOGY_CPU)
TOPOLOGY_SYSTEM = 50  # across NUMA nodes (SMP interconnect)
TOPOLOGY_LEVELS = (
    TOPOLOGY_INTERNAL,
    TOPOLOGY_SINGLE,
    TOPOLOGY_MULTIPLE,
    TOPOLOGY_HOSTBRIDGE,
    TOPOLOGY_NODE,
    TOPOLOGY_SYSTEM,
)
# NVML_DEVICE_MEMORY_LIMIT_MAX: the hard limit nvmlDeviceGetMemoryLimits_v1 reports for a cgroup without
# one (its soft limit then reads 0), and what nvmlDeviceSetMemoryLimits_v1 takes to clear it.
MEMORY_LIMIT_MAX = 0xFFFFFFFFFFFFFFFF
# nvmlTemperatureThresholds_t values the callers need.
TEMPERATURE_THRESHOLDS = {"shutdown": 0, "slowdown": 1}


class NvmlError(Exception):
    """A failed NVML call. ``call`` is the NVML function name, ``code`` the return code's name
    (``"NOT_SUPPORTED"``) or, for a code this table does not know, its number."""

    def __init__(self, call: str, code: int | str, detail: str = "") -> None:
        if isinstance(code, int):
            code = RETURN_CODES.get(code, code)
        self.call = call
        self.code: int | str = code
        self.detail = detail
        super().__init__(f"{call} failed: {code}" + (f" ({detail})" if detail else ""))


@dataclass(frozen=True)
class MemoryInfo:
    total: int  # bytes
    free: int
    used: int


@dataclass(frozen=True)
class Utilization:
    gpu: int  # percent of time a kernel ran, 0-100
    memory: int  # percent of time device memory was read or written, 0-100


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    used_memory: int | None  # bytes; None where NVML reports "not available"


@dataclass(frozen=True)
class RetiredPages:
    """Framebuffer pages the driver retired (pre-Ampere), by cause, and whether a retirement waits
    for the next GPU reset or reboot."""

    single_bit: int  # NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    double_bit: int  # NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    pending: bool


@dataclass(frozen=True)
class RemappedRows:
    """Row remapping (Ampere and later): rows remapped for correctable and uncorrectable errors,
    a remap waiting for a reset, and a remap that failed (the GPU needs service)."""

    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


@dataclass(frozen=True)
class MemoryLimits:
    """``nvmlGetMemoryLimits_v1_t`` of one cgroup on one GPU, in bytes: the soft limit (guaranteed before
    allocations may fail under pressure; 0 = none), the hard limit (``MEMORY_LIMIT_MAX`` = none) and the
    memory the driver accounts to the cgroup on that GPU."""

    soft: int
    hard: int
    used: int

    @property
    def limited(self) -> bool:
        return self.soft != 0 or self.hard != MEMORY_LIMIT_MAX


@dataclass(frozen=True)
class NvLinkRemote:
    """The far end of one active NVLink: a GPU's PCI bus id, or an NVSwitch."""

    bus_id: str
    switch: bool


@dataclass(frozen=True)
class GpuInstanceProfile:
    """A MIG GPU-instance profile the card offers, and where on its slices one may start."""

    id: int  # NVML's profile id, what creating an instance takes
    name: str  # "1g.5gb"
    slice_count: int
    memory_mib: int
    instance_count: int
    placements: tuple[tuple[int, int], ...]  # (start, size) in memory slices


@dataclass(frozen=True)
class GpuInstanceInfo:
    """A GPU instance present on the card, with the compute instances inside it."""

    id: int
    profile_id: int
    start: int
    size: int
    compute_instances: tuple[int, ...]


@dataclass(frozen=True)
class MigDeviceInfo:
    index: int  # slot on the parent GPU
    uuid: str  # MIG-...
    name: str
    gpu_instance_id: int
    compute_instance_id: int
    memory: MemoryInfo


@dataclass(frozen=True)
class XidEvent:
    """One event from ``nvmlEventSetWait`` (``xid`` is ``eventData``: the Xid for Xid events)."""

    device_uuid: str
    event_type: int
    xid: int
    gpu_instance_id: int = NO_INSTANCE
    compute_instance_id: int = NO_INSTANCE


class NvmlDevice(Protocol):
    """A handle from ``nvmlDeviceGetHandleByIndex``/``ByUUID``. Every method raises ``NvmlError``."""

    @property
    def index(self) -> int: ...
    def uuid(self) -> str: ...
    def name(self) -> str: ...
    def memory_info(self) -> MemoryInfo: ...
    def utilization_rates(self) -> Utilization: ...
    def temperature(self) -> int: ...  # GPU core sensor, °C
    def power_usage(self) -> int: ...  # milliwatts
    def pci_bus_id(self) -> str: ...  # "00000000:3B:00.0"
    def numa_node_id(self) -> int: ...
    def minor_number(self) -> int: ...  # /dev/nvidia<minor>
    def cuda_compute_capability(self) -> tuple[int, int]: ...
    def compute_running_processes(self) -> list[ProcessInfo]: ...
    def total_ecc_errors(self, uncorrected: bool, aggregate: bool = False) -> int: ...
    def retired_pages(self) -> RetiredPages: ...
    def remapped_rows(self) -> RemappedRows: ...
    def temperature_threshold(self, kind: str) -> int: ...  # °C; kind in TEMPERATURE_THRESHOLDS
    def clock_event_reasons(self) -> int: ...  # CLOCK_EVENT_REASONS bits active now
    def topology_common_ancestor(self, other: NvmlDevice) -> int: ...  # a TOPOLOGY_LEVELS value
    def nvlink_remotes(self) -> list[NvLinkRemote]: ...  # one per active link; [] without NVLink
    def mig_mode(self) -> tuple[bool, bool]: ...  # (current, pending)
    def mig_devices(self) -> list[MigDeviceInfo]: ...  # [] when MIG is off or unsupported
    def gpu_instance_profiles(self) -> list[GpuInstanceProfile]: ...  # the card's, with placements
    def gpu_instances(self) -> list[GpuInstanceInfo]: ...
    def create_gpu_instance(self, profile_id: int, start: int, size: int) -> int: ...  # the GI id
    def create_compute_instance(self, gpu_instance_id: int) -> int: ...  # the CI spanning the GI; its id
    def destroy_compute_instance(self, gpu_instance_id: int, compute_instance_id: int) -> None: ...
    def destroy_gpu_instance(self, gpu_instance_id: int) -> None: ...  # IN_USE while it has CIs
    def supported_event_types(self) -> int: ...
    # ``cgroup``: the full sysfs path of a cgroup v2 directory; NOT_SUPPORTED on MIG, FUNCTION_NOT_FOUND
    # on a driver older than the call.
    def memory_limits(self, cgroup: str) -> MemoryLimits: ...
    def set_memory_limits(self, cgroup: str, soft: int, hard: int) -> None: ...


class NvmlEventSet(Protocol):
    def register(self, device: NvmlDevice, event_types: int) -> None: ...
    def wait(self, timeout_ms: int) -> XidEvent | None: ...  # None on timeout
    def close(self) -> None: ...


class Nvml(Protocol):
    """An initialised NVML session: ``nvmlInit`` once when opened, ``nvmlShutdown`` once on ``close``."""

    def device_count(self) -> int: ...
    def device(self, index: int) -> NvmlDevice: ...
    def device_by_uuid(self, uuid: str) -> NvmlDevice: ...
    def driver_version(self) -> str: ...
    def cuda_driver_version(self) -> int: ...  # e.g. 12040
    def event_set(self) -> NvmlEventSet: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


def mig_enabled(device: NvmlDevice) -> bool:
    """Whether MIG is on now; a GPU without MIG support (NOT_SUPPORTED) simply has it off."""
    try:
        return device.mig_mode()[0]
    except NvmlError as exc:
        if exc.code == "NOT_SUPPORTED":
            return False
        raise
