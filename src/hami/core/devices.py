"""The device model shared by the scheduler, device plugin, monitor and doctor.

Field names follow HAMi's Go structs; wire encodings live in ``hami.core.codec``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MODE_HAMI_CORE = "hami-core"
MODE_MIG = "mig"
MODE_MPS = "mps"
# Who enforces a card's vGPU memory limits (the device plugin's --memory-enforcement): HAMi-core's shim,
# or the driver's per-cgroup limits through the container toolkit's hook. Registered per device as
# ``memoryEnforcement`` (omitted for hami-core), a key HAMi's decoder ignores.
ENFORCE_HAMI_CORE = "hami-core"
ENFORCE_DRIVER = "driver"
ENFORCEMENTS = (ENFORCE_HAMI_CORE, ENFORCE_DRIVER)


@dataclass(frozen=True)
class MigPlacement:
    start: int
    size: int


@dataclass(frozen=True)
class MigProfile:
    name: str
    memory_mb: int
    core: int
    slice_count: int
    placements: tuple[MigPlacement, ...] = ()


@dataclass(frozen=True)
class DeviceInfo:
    """One physical GPU as registered in ``hami.io/node-nvidia-register``."""

    id: str
    index: int = 0
    count: int = 0
    devmem: int = 0  # MiB, after deviceMemoryScaling
    devcore: int = 0  # 100 = whole card, after deviceCoreScaling
    type: str = ""
    numa: int = 0
    mode: str = ""
    health: bool = False
    mig_profiles: tuple[MigProfile, ...] = ()
    device_vendor: str = ""
    enforcement: str = ""  # "" = ENFORCE_HAMI_CORE (not written); ENFORCE_DRIVER
    pair_score: dict[str, int] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class ContainerDevice:
    """One device assigned to one container: ``<UUID>,<Type>,<Usedmem>,<Usedcores>:``."""

    uuid: str
    type: str
    usedmem: int  # MiB
    usedcores: int  # 0-100


# Per container (init containers first, then regular), the devices it holds.
ContainerDevices = tuple[ContainerDevice, ...]
PodDevices = tuple[ContainerDevices, ...]


@dataclass(frozen=True)
class MigAllocation:
    """One entry of ``hami.io/vgpu-mig-allocations``: a MIG placement chosen for a container device.

    The scheduler fills the first five fields; the device plugin adds the runtime identity
    (``mig_uuid``, ``gpu_instance_id``, ``compute_instance_id``: all three or none).
    """

    container_index: int  # init containers first, then regular containers
    device_index: int
    gpu_uuid: str
    profile: str
    placement: MigPlacement
    mig_uuid: str = ""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
