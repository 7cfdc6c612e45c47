"""The priority / utilisation-switch feedback loop (§A.9, HAMi v2.10 ``feedback.go``).

``observe`` is the pure decision step over a snapshot of every loaded region; ``FeedbackLoop``
applies its writes on a 5 s ticker, after rescanning the container dirs, through the descriptor
each region file was opened with (never through its name: see ``region.file``).

Section signs (§) refer to docs/design/node-agent-region.md.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from hami.core import klog
from hami.exporter.discovery import ContainerLister
from hami.exporter.region.file import RegionFile
from hami.exporter.region.layout import MAX_DEVICES, UUID_LEN, Layout

log = klog.get_logger(__name__)
TICK_S = 5.0
# Created by the device plugin while it repartitions MIG (plugin/lock.go); the monitor mounts /tmp.
MIG_APPLY_LOCK = "/tmp/hami/hami-mig-apply.lock"
_I32 = struct.Struct("<i")

Field = Literal["recent_kernel", "utilization_switch"]


@dataclass(frozen=True)
class FeedbackState:
    key: str  # the container dir name
    recent_kernel: int
    priority: int
    utilization_switch: int
    uuids: tuple[bytes, ...]  # the raw 96-byte uuids of slots 0..15 whose first byte is not NUL


@dataclass(frozen=True)
class FeedbackWrite:
    key: str
    field: Field
    value: int


def _blocking(uts: dict[bytes, list[int]], p: int, uuids: Sequence[bytes]) -> bool:
    """Some container of strictly higher priority (smaller number) was active on one of our GPUs."""
    for u in uuids:
        counts = uts.get(u)
        if counts is not None and any(counts[j] > 0 for j in range(min(p, len(counts)))):
            return True
    return False


def _contended(uts: dict[bytes, list[int]], p: int, uuids: Sequence[bytes]) -> bool:
    """Blocking, or at least two active containers of our own priority share one of our GPUs."""
    if _blocking(uts, p, uuids):
        return True
    for u in uuids:
        counts = uts.get(u)
        if counts is not None and 0 <= p < len(counts) and counts[p] > 1:
            return True
    return False


def observe(states: Sequence[FeedbackState]) -> list[FeedbackWrite]:
    """One tick of HAMi's ``Observe``: decay activity, count actives per (GPU, priority), decide."""
    writes: list[FeedbackWrite] = []
    uts: dict[bytes, list[int]] = {}
    kernel: dict[str, int] = {}
    # Pass 1: decay recent_kernel and count containers still active.
    for c in states:
        rk = c.recent_kernel
        if rk > 0:
            rk -= 1
            if rk > 0 and c.priority >= 0:
                for u in c.uuids:
                    counts = uts.setdefault(u, [])
                    counts.extend([0] * (c.priority + 1 - len(counts)))
                    counts[c.priority] += 1
            writes.append(FeedbackWrite(c.key, "recent_kernel", rk))
        kernel[c.key] = rk
    # Pass 2: block behind higher priority, and enforce the core limit only under contention.
    for c in states:
        rk = kernel[c.key]
        blocking = _blocking(uts, c.priority, c.uuids)
        if blocking and rk >= 0:
            log.v(5).info("Setting Blocking to on %s", c.key)
            writes.append(FeedbackWrite(c.key, "recent_kernel", -1))
        elif not blocking and rk < 0:
            log.v(5).info("Setting Blocking to off %s", c.key)
            writes.append(FeedbackWrite(c.key, "recent_kernel", 0))
        if _contended(uts, c.priority, c.uuids):
            if c.utilization_switch != 1:
                log.v(5).info("Setting UtilizationSwitch to on %s", c.key)
                writes.append(FeedbackWrite(c.key, "utilization_switch", 1))
        elif c.utilization_switch != 0:
            log.v(5).info("Setting UtilizationSwitch to off %s", c.key)
            writes.append(FeedbackWrite(c.key, "utilization_switch", 0))
    return writes


def read_state(key: str, region: RegionFile) -> tuple[FeedbackState, Layout] | None:
    """The feedback fields of a ready region, or None (not initialised, bad, or changed)."""
    layout = region.layout()
    if not isinstance(layout, Layout):
        return None
    table = region.copy(layout.off_uuids, UUID_LEN * MAX_DEVICES)
    tail = region.copy(layout.off_proc_num, layout.off_priority + 4 - layout.off_proc_num)
    if table is None or tail is None:
        return None
    uuids = tuple(
        table[off : off + UUID_LEN] for off in range(0, UUID_LEN * MAX_DEVICES, UUID_LEN) if table[off] != 0
    )
    base = layout.off_proc_num
    state = FeedbackState(
        key=key,
        recent_kernel=_I32.unpack_from(tail, layout.off_recent_kernel - base)[0],
        priority=_I32.unpack_from(tail, layout.off_priority - base)[0],
        utilization_switch=_I32.unpack_from(tail, layout.off_utilization_switch - base)[0],
        uuids=uuids,
    )
    return state, layout


def feedback_tick(lister: ContainerLister) -> list[FeedbackWrite]:
    """Read every loaded region, decide, and apply the writes (under the lister lock)."""
    with lister.lock:
        regions: dict[str, tuple[RegionFile, Layout]] = {}
        states = []
        for c in lister.containers():
            if c.region is None:
                continue
            got = read_state(c.dirname, c.region)
            if got is not None:
                states.append(got[0])
                regions[c.dirname] = (c.region, got[1])
        writes = observe(states)
        for w in writes:
            region, layout = regions[w.key]
            offset = layout.off_recent_kernel if w.field == "recent_kernel" else layout.off_utilization_switch
            region.write_i32(offset, w.value)
        return writes


class FeedbackLoop:
    """Every ``TICK_S``: rescan the container dirs (``update``), then run the feedback step.

    While the MIG apply lock file exists the loop is paused (§A.9 step 3): no rescan and no
    write into any region, since the device plugin is repartitioning the GPUs. HAMi watches the
    lock with fsnotify; checking it on each tick gives the same guarantee, as nothing is written
    between ticks.
    """

    def __init__(
        self,
        lister: ContainerLister,
        pod_uids: Callable[[], set[str] | None],
        interval_s: float = TICK_S,
        on_update: Callable[[list[str]], None] = lambda errors: None,
        mig_lock: str = MIG_APPLY_LOCK,
    ) -> None:
        self._on_update = on_update
        self._lister = lister
        self._pod_uids = pod_uids
        self._interval = interval_s
        self._mig_lock = mig_lock
        self.paused = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feedback", daemon=True)

    def prepare(self) -> None:
        """Create the lock file's directory (0755), as HAMi's monitor does before watching it."""
        try:
            os.makedirs(os.path.dirname(self._mig_lock), mode=0o755, exist_ok=True)
        except OSError as err:
            log.error("Failed to create MIG apply lock directory: %s", err)

    def _locked(self) -> bool:
        if os.path.exists(self._mig_lock):
            if not self.paused:
                log.info("Received MIG apply lock file")
                log.info("MIG apply lock file detected, waiting for lock file to be removed")
                self.paused = True
            return True
        if self.paused:
            log.info("MIG apply lock file has been removed, restarting watchAndFeedback")
            self.paused = False
        return False

    def tick(self) -> None:
        if self._locked():
            return
        try:
            result = self._lister.update(self._pod_uids())
        except OSError as err:
            log.error("Failed to update container list: %s", err)
            return
        self._on_update(result.errors)
        writes = feedback_tick(self._lister)
        if log.v(4):
            log.v(4).info(
                "Updated container list: %d dir(s), %d region(s) loaded, %d removed; "
                "feedback wrote %d value(s)",
                len(self._lister.containers()),
                result.loaded,
                len(result.removed),
                len(writes),
            )

    def _run(self) -> None:
        log.info("Starting watchAndFeedback")
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # the loop must outlive any one bad tick
                log.error("feedback tick failed", exc_info=True)
            self._stop.wait(self._interval)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
