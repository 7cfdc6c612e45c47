"""From NVML facts to the register ``DeviceInfo`` list and the kubelet's split device IDs (§C.3–§C.6).

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hami.core.devices import ENFORCE_HAMI_CORE, MODE_MIG, DeviceInfo, MigProfile
from hami.deviceplugin.config import PluginConfig

MIB = 1 << 20
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


@dataclass(frozen=True)
class GpuFacts:
    """What NVML says about one physical GPU; ``memory_total`` is None when NVML answers NOT_SUPPORTED."""

    uuid: str
    index: int
    name: str
    memory_total: int | None  # bytes
    numa: int = 0
    mig_profiles: tuple[MigProfile, ...] = ()
    minor: int = 0  # /dev/nvidia<minor>


@dataclass(frozen=True)
class Skipped:
    uuid: str
    reason: str


def register_type(model: str) -> str:
    """docs/guides/device-plugin-debugging.md §4.2 / §C.4: prefix ``NVIDIA-`` only when the model lacks the
    ``NVIDIA`` prefix."""
    return model if model.startswith("NVIDIA") else f"NVIDIA-{model}"


def numa_from_sysfs_text(text: str) -> int:
    """``/sys/bus/pci/devices/<id>/numa_node`` content; negative means no NUMA affinity, i.e. 0."""
    value = int(text.strip())
    return max(value, 0)


def pci_sysfs_id(bus_id: str) -> str:
    """NVML ``00000000:3B:00.0`` → sysfs ``0000:3b:00.0`` (one leading ``0000`` stripped, lowercased)."""
    return (bus_id[4:] if bus_id.startswith("0000") else bus_id).lower()


def build_register_devices(
    facts: Iterable[GpuFacts], cfg: PluginConfig, health: dict[str, bool]
) -> tuple[list[DeviceInfo], list[Skipped]]:
    """The devices for ``hami.io/node-nvidia-register``, sorted by index so the annotation is stable."""
    devices: list[DeviceInfo] = []
    skipped: list[Skipped] = []
    mig = cfg.operating_mode == MODE_MIG
    for gpu in sorted(facts, key=lambda f: f.index):
        if cfg.filter_devices.excludes(gpu.uuid, gpu.index):
            continue
        total = gpu.memory_total
        if total is None:
            if cfg.pre_configured_device_memory <= 0:
                skipped.append(
                    Skipped(gpu.uuid, "memory info not supported and no preConfiguredDeviceMemory")
                )
                continue
            total = cfg.pre_configured_device_memory * MIB
        devmem = total // MIB
        if cfg.device_memory_scaling != 1 and not mig:
            devmem = int(devmem * cfg.device_memory_scaling)
        if mig:
            # The number of GI placements of a profile is its instance count on this card.
            count = max((len(p.placements) for p in gpu.mig_profiles), default=0)
            if count == 0:
                skipped.append(Skipped(gpu.uuid, "no allowlisted MIG profile"))
                continue
            devcore = 100
        else:
            count = cfg.device_split_count
            devcore = int(cfg.device_core_scaling * 100)
        devices.append(
            DeviceInfo(
                id=gpu.uuid,
                index=gpu.index,
                count=count,
                devmem=devmem,
                devcore=devcore,
                type=register_type(gpu.name),
                numa=gpu.numa,
                mode=cfg.operating_mode,
                health=health.get(gpu.uuid, True),
                mig_profiles=gpu.mig_profiles if mig else (),
                # not written for HAMi-core (HAMi's bytes unchanged), nor in MIG mode (no shim to replace)
                enforcement=cfg.memory_enforcement
                if cfg.memory_enforcement != ENFORCE_HAMI_CORE and not mig
                else "",
            )
        )
    return devices, skipped


@dataclass(frozen=True)
class KubeletDevice:
    id: str
    health: str
    numa: int | None  # set only with enableNumaTopology


def split_device_ids(uuid: str, split: int) -> list[str]:
    return [f"{uuid}-{i}" for i in range(split)]


def kubelet_devices(devices: Sequence[DeviceInfo], cfg: PluginConfig) -> list[KubeletDevice]:
    """ListAndWatch content: ``<UUID>-<i>`` for i < split per GPU, all carrying that GPU's health."""
    out: list[KubeletDevice] = []
    for dev in devices:
        health = HEALTHY if dev.health else UNHEALTHY
        numa = dev.numa if cfg.enable_numa_topology else None
        out.extend(KubeletDevice(i, health, numa) for i in split_device_ids(dev.id, cfg.device_split_count))
    return out


_REPLICA = re.compile(r"-\d+$")


def physical_device_id(device_id: str) -> str:
    """Strips ``::n`` (time-slicing annotation) or the ``-<n>`` replica suffix of a 6-dash split ID."""
    if "::" in device_id:
        return device_id.split("::", 1)[0]
    if device_id.count("-") == 6:
        return _REPLICA.sub("", device_id)
    return device_id
