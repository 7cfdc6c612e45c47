"""One scrape's readings of the node (``NodeView``, ``HostDevice``) and the monitor's counters."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hami.core.nvml import RemappedRows, RetiredPages
from hami.exporter.attribution import ContainerView, MigView, PodLabels, UnlimitedView


def registered_type(model: str) -> str:
    """The device type as the device plugin registers it (v2.8+): prefix only when missing."""
    return model if model.startswith("NVIDIA") else "NVIDIA-" + model


@dataclass(frozen=True)
class MigIdentity:
    uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int


@dataclass(frozen=True)
class HostDevice:
    """One physical GPU; ``None`` marks a reading whose NVML call failed (that series is dropped)."""

    index: int
    uuid: str
    type: str
    memory_used: int | None = None
    memory_total: int | None = None
    util_gpu: int | None = None
    util_memory: int | None = None
    temperature: int | None = None
    power_watts: float | None = None
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    temperature_slowdown: int | None = None
    retired: RetiredPages | None = None
    remapped: RemappedRows | None = None
    clock_event_reasons: int | None = None
    xid_errors: int = 0
    healthy: bool = True
    migs: tuple[MigIdentity, ...] = ()
    process_memory: int | None = None  # Σ of NVML's compute processes; None: unread or not available
    pids: tuple[int, ...] = ()  # host PIDs of the compute processes NVML lists on the GPU
    pci_bus_id: str = ""  # NVML's "00000000:3B:00.0"; "" when unread (names the GPU's dmem region)


CtrKey = tuple[str, str, str]  # (namespace, pod, container), as the views name a container


@dataclass(frozen=True)
class DriverUsage:
    """One container device as one driver source accounts it; bytes, limits 0 = none."""

    namespace: str
    pod: str
    container: str
    vdevice_index: int
    device_uuid: str  # as the container's view exports it
    source: str
    soft_limit: int
    hard_limit: int
    used: int


@dataclass(frozen=True)
class DriverView:
    usage: tuple[DriverUsage, ...] = ()
    sources: Mapping[str, str] | None = None  # source -> AVAILABLE or why it is absent
    skipped: Mapping[str, int] | None = None  # refusal reason -> cgroups meeting it now
    refused: Mapping[str, frozenset[str]] | None = None  # cgroup -> reasons, for onsets and logs

    def limited(self) -> set[CtrKey]:
        """The containers a driver limit (soft or hard) applies to."""
        return {(u.namespace, u.pod, u.container) for u in self.usage if u.hard_limit or u.soft_limit}


@dataclass(frozen=True)
class NodeView:
    node: str
    now: float
    hosts: tuple[HostDevice, ...] = ()
    containers: tuple[ContainerView, ...] = ()
    pod_labels: tuple[PodLabels, ...] = ()
    migs: tuple[MigView, ...] = ()
    regions: Mapping[str, int] = field(default_factory=dict)  # state -> count
    skipped: Mapping[str, int] = field(default_factory=dict)  # reason -> regions affected now
    inconsistencies: Mapping[str, int] = field(default_factory=dict)  # kind -> count (exporter.reconcile)
    unlimited: tuple[UnlimitedView, ...] = ()
    driver: DriverView = DriverView()  # the driver's accounting (exporter.driver)


@dataclass(frozen=True)
class Counters:
    region_skips: Mapping[str, int]
    nvml_errors: Mapping[str, int]
