"""One registered device as the fit reads it: flat fields, no attribute indirection."""

from __future__ import annotations

from hami.core.devices import ENFORCE_HAMI_CORE, MODE_MIG, DeviceInfo, MigPlacement, MigProfile
from hami.scheduler.engine.mig import candidates


class Dev:
    """One device of a view; the fields Fit reads, without attribute indirection."""

    __slots__ = (
        "cordoned", "count", "enforcement", "health", "id", "index", "mig", "mode", "numa", "occupied",
        "pair_score", "profiles", "totalcore", "totalmem", "type",
    )

    def __init__(self, info: DeviceInfo, cordoned: bool) -> None:
        self.id = info.id
        self.index = info.index
        self.count = info.count
        self.totalmem = info.devmem
        self.totalcore = info.devcore
        self.type = info.type
        self.numa = info.numa
        self.mode = info.mode
        self.enforcement = info.enforcement or ENFORCE_HAMI_CORE
        self.health = info.health
        self.cordoned = cordoned
        self.mig = info.mode == MODE_MIG
        self.pair_score = info.pair_score
        # MIG only: profiles in the order they are tried, and the placements already reserved.
        self.profiles: tuple[MigProfile, ...] = candidates(info.mig_profiles) if self.mig else ()
        self.occupied: tuple[MigPlacement, ...] = ()
