"""MIG placement for the scheduler (§4.4, §4.5 step 15, docs/design/scheduler-annotations.md §2.4,
docs/design/scheduler-extender.md §6.2).

A card in ``mig`` mode registers the profiles it may be cut into (``migProfiles``: memory, compute
share, slice count and the slice ranges each profile may start at). A request is served by the
smallest profile whose memory covers it and that still has a placement overlapping nothing in
use on the card: reservations of other pods (``hami.io/vgpu-mig-allocations``) and the instances
this pod was given earlier. Pure functions; no I/O.

Section signs (§) refer to docs/design/scheduler-filter.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hami.core.devices import MigAllocation, MigPlacement, MigProfile, PodDevices

# A choice for one container device: the profile's name, its memory (MiB) and the slice range.
MigChoice = tuple[str, int, MigPlacement]


def candidates(profiles: Iterable[MigProfile]) -> tuple[MigProfile, ...]:
    """Profiles in the order they are tried: least memory first, then fewest slices (stable)."""
    return tuple(sorted(profiles, key=lambda p: (p.memory_mb, p.slice_count)))


def overlaps(a: MigPlacement, b: MigPlacement) -> bool:
    return a.start < b.start + b.size and b.start < a.start + a.size


def select(
    profiles: Sequence[MigProfile], occupied: Sequence[MigPlacement], memory: int,
) -> MigChoice | None:
    """The first profile (in ``candidates`` order) with ``memory_mb >= memory`` and a free placement.

    Placements of one profile are tried in registered order; a placement is free when it overlaps
    none of ``occupied``. None when no allowed profile fits.
    """
    for p in profiles:
        if p.memory_mb < memory:
            continue
        for place in p.placements:
            if place.size > 0 and not any(overlaps(place, o) for o in occupied):
                return p.name, p.memory_mb, place
    return None


def allocations(
    devices: PodDevices, choices: Sequence[Sequence[MigChoice | None]],
) -> tuple[MigAllocation, ...]:
    """The ``hami.io/vgpu-mig-allocations`` entries: one per container device that got a MIG choice.

    ``choices`` parallels ``devices`` (container, then device position); indexes are those of
    the pod's device annotation (init containers first).
    """
    out: list[MigAllocation] = []
    for ci, (container, picked) in enumerate(zip(devices, choices, strict=True)):
        for di, (dev, choice) in enumerate(zip(container, picked, strict=True)):
            if choice is not None:
                name, _, place = choice
                out.append(MigAllocation(ci, di, dev.uuid, name, place))
    return tuple(out)


def unreserved(devices: PodDevices, allocs: Iterable[MigAllocation]) -> frozenset[str]:
    """UUIDs of the pod's container devices that have no matching MIG reservation.

    A device entry on a ``mig`` card without one has an unknown placement, so
    docs/design/scheduler-extender.md §6.2 takes that
    card out of service; for ``hami-core`` cards the set is simply ignored.
    """
    reserved = {(a.container_index, a.device_index, a.gpu_uuid) for a in allocs}
    return frozenset(
        dev.uuid
        for ci, container in enumerate(devices)
        for di, dev in enumerate(container)
        if (ci, di, dev.uuid) not in reserved
    )
