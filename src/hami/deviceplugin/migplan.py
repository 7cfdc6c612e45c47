"""Dynamic MIG as data (``operatingmode: mig``, §C.8): the profiles a card registers, the
instances one Allocate must create at the placements the scheduler chose, and the instances no pod
holds any more. Pure; ``migpartition`` does the NVML calls.

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from hami.core.devices import ContainerDevices, MigAllocation, MigPlacement, MigProfile
from hami.core.nvml import GpuInstanceInfo, GpuInstanceProfile

# Allocate error reasons of MIG mode (hami_deviceplugin_allocate_errors_total{reason}).
MIG_ALLOCATION_MISSING = "mig_allocation_missing"  # no hami.io/vgpu-mig-allocations entry for a device
MIG_PROFILE_NOT_ALLOWED = "mig_profile_not_allowed"  # the card does not offer it, or the allowlist drops it
MIG_PLACEMENT_INVALID = "mig_placement_invalid"  # not one of the profile's placements on the card
MIG_CREATE_FAILED = "mig_create_failed"  # NVML refused to create the instance (busy slices, driver error)
MIG_LOCK_HELD = "mig_lock_held"  # another repartition holds the MIG apply lock
REASONS = (
    MIG_ALLOCATION_MISSING,
    MIG_PROFILE_NOT_ALLOWED,
    MIG_PLACEMENT_INVALID,
    MIG_CREATE_FAILED,
    MIG_LOCK_HELD,
)


class MigPlanError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def mig_profiles(
    offered: Iterable[GpuInstanceProfile], allowed: frozenset[str] | None
) -> tuple[MigProfile, ...]:
    """The registered ``migProfiles`` of a card: the allowlisted profiles it offers, each with its
    share of the compute (slices over the whole card's, rounded up) and its placements."""
    profiles = list(offered)
    whole = max((p.slice_count for p in profiles), default=0)
    return tuple(
        MigProfile(
            name=p.name,
            memory_mb=p.memory_mib,
            core=math.ceil(100 * p.slice_count / whole) if whole else 0,
            slice_count=p.slice_count,
            placements=tuple(MigPlacement(start, size) for start, size in p.placements),
        )
        for p in profiles
        if allowed is None or p.name in allowed
    )


@dataclass(frozen=True)
class MigStep:
    """One instance to create for one container device."""

    container_index: int
    device_index: int
    gpu_uuid: str
    profile: GpuInstanceProfile
    start: int
    size: int


def plan(
    allocations: Sequence[MigAllocation],
    container_index: int,
    devices: ContainerDevices,
    offered: Mapping[str, Sequence[GpuInstanceProfile]],
    allowed: Mapping[str, frozenset[str] | None],
) -> list[MigStep]:
    """The instances container ``container_index`` needs; refuses anything the card cannot hold."""
    by_key = {(a.container_index, a.device_index): a for a in allocations}
    steps = []
    for i, dev in enumerate(devices):
        a = by_key.get((container_index, i))
        if a is None or a.gpu_uuid != dev.uuid:
            raise MigPlanError(
                MIG_ALLOCATION_MISSING,
                f"no MIG placement for container {container_index} device {i} ({dev.uuid}) in "
                "hami.io/vgpu-mig-allocations",
            )
        profile = next((p for p in offered.get(dev.uuid, ()) if p.name == a.profile), None)
        permitted = allowed.get(dev.uuid)
        if profile is None or (permitted is not None and a.profile not in permitted):
            raise MigPlanError(
                MIG_PROFILE_NOT_ALLOWED,
                f"MIG profile {a.profile} is not offered or not allowlisted on {dev.uuid}",
            )
        place = (a.placement.start, a.placement.size)
        if place not in profile.placements:
            raise MigPlanError(
                MIG_PLACEMENT_INVALID,
                f"MIG placement start={place[0]} size={place[1]} is not one of profile {a.profile}'s "
                f"placements on {dev.uuid} ({', '.join(f'{s}+{z}' for s, z in profile.placements)})",
            )
        steps.append(MigStep(container_index, i, dev.uuid, profile, *place))
    return steps


@dataclass(frozen=True)
class MigMade:
    """An instance created for a step: its MIG device UUID and NVML ids."""

    step: MigStep
    mig_uuid: str
    gpu_instance_id: int
    compute_instance_id: int


def fill(allocations: Sequence[MigAllocation], made: Iterable[MigMade]) -> list[MigAllocation]:
    """The annotation's entries with the runtime identity of what was made."""
    by_key = {(m.step.container_index, m.step.device_index): m for m in made}
    out = []
    for a in allocations:
        m = by_key.get((a.container_index, a.device_index))
        out.append(
            a
            if m is None
            else replace(
                a,
                mig_uuid=m.mig_uuid,
                gpu_instance_id=m.gpu_instance_id,
                compute_instance_id=m.compute_instance_id,
            )
        )
    return out


def held(allocations_by_pod: Iterable[Sequence[MigAllocation]]) -> set[tuple[str, int]]:
    """(GPU UUID, GPU instance id) of every instance a live pod holds."""
    return {
        (a.gpu_uuid, a.gpu_instance_id)
        for allocations in allocations_by_pod
        for a in allocations
        if a.gpu_instance_id is not None
    }


def orphans(
    instances: Mapping[str, Sequence[GpuInstanceInfo]], live: set[tuple[str, int]]
) -> list[tuple[str, GpuInstanceInfo]]:
    """The GPU instances on the cards that no live pod holds (their pod is gone, or a crash left them)."""
    return [(uuid, gi) for uuid, gis in instances.items() for gi in gis if (uuid, gi.id) not in live]
