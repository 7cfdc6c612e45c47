"""The NVML edge: GPU facts for registration (§C.3–§C.4) and the health loop (§C.9 and beyond).

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from hami.core import klog
from hami.core.nvml import (
    EVENT_DOUBLE_BIT_ECC,
    EVENT_XID_CRITICAL,
    HEALTH_EVENTS,
    Nvml,
    NvmlError,
    NvmlEventSet,
    XidEvent,
)
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.health import (
    CHECK_ECC,
    CHECK_RETIRED_PAGES,
    CHECK_TEMPERATURE,
    ECC_DOUBLE_BIT,
    REGISTRATION_FAILED,
    WAIT_ERROR,
    XID_CRITICAL,
    Reading,
    XidPolicy,
    judge,
)
from hami.deviceplugin.inventory import GpuFacts, numa_from_sysfs_text, pci_sysfs_id
from hami.deviceplugin.migplan import mig_profiles
from hami.deviceplugin.topology import GpuLinks

log = klog.get_logger(__name__)
T = TypeVar("T")


def _numa(dev_numa: Callable[[], int], bus_id: Callable[[], str], sysfs: Path) -> int:
    """NVML's NUMA node; else HAMi's sysfs read of ``numa_node``; 0 when neither answers."""
    try:
        return max(dev_numa(), 0)
    except NvmlError:
        pass
    try:
        path = sysfs / "bus" / "pci" / "devices" / pci_sysfs_id(bus_id()) / "numa_node"
        return numa_from_sysfs_text(path.read_text(encoding="utf-8"))
    except (NvmlError, OSError, ValueError) as exc:
        log.warning("failed to get numa information from sysfs: %s", exc)
        return 0


def _minor(dev_minor: Callable[[], int], index: int) -> int:
    """The device node number; the index when NVML cannot say (only used for --pass-device-specs)."""
    try:
        return dev_minor()
    except NvmlError:
        return index


def read_gpu_facts(nvml: Nvml, sysfs: Path = Path("/sys")) -> list[GpuFacts]:
    """Every GPU NVML sees. A device whose memory info is NOT_SUPPORTED gets ``memory_total=None``."""
    try:
        count = nvml.device_count()
    except NvmlError as exc:
        log.error("nvml GetDeviceCount err: %s", exc)
        raise
    facts = []
    for i in range(count):
        dev = nvml.device(i)
        uuid = dev.uuid()
        total: int | None
        try:
            total = dev.memory_info().total
        except NvmlError as exc:
            if exc.code != "NOT_SUPPORTED":
                log.error("nvml get memory error: %s", exc)
                raise
            log.warning("GetMemoryInfo not supported for device %s; using preConfiguredDeviceMemory", uuid)
            total = None
        fact = GpuFacts(
            uuid=uuid,
            index=dev.index,
            name=dev.name(),
            memory_total=total,
            numa=_numa(dev.numa_node_id, dev.pci_bus_id, sysfs),
            minor=_minor(dev.minor_number, dev.index),
        )
        log.v(5).info(
            "nvml device %d: uuid %s, name %s, memory %s, numa %d, /dev/nvidia%d",
            fact.index,
            fact.uuid,
            fact.name,
            "not supported" if total is None else f"{total >> 20} MiB",
            fact.numa,
            fact.minor,
        )
        facts.append(fact)
    return facts


def with_mig_profiles(nvml: Nvml, facts: Sequence[GpuFacts], cfg: PluginConfig) -> list[GpuFacts]:
    """The facts of ``mig`` mode: each card's allowlisted GPU-instance profiles (none when MIG is off)."""
    out = []
    for fact in facts:
        try:
            offered = nvml.device_by_uuid(fact.uuid).gpu_instance_profiles()
        except NvmlError as exc:
            log.error("no MIG profiles on %s: %s", fact.uuid, exc)
            offered = []
        out.append(replace(fact, mig_profiles=mig_profiles(offered, cfg.allowed_mig_profiles(fact.name))))
    return out


def read_links(nvml: Nvml, uuids: Sequence[str]) -> list[GpuLinks]:
    """The topology facts of the GPUs in ``uuids`` (in that order), for the pair scores.

    HAMi gives up on the whole score when one NVML topology call fails; here only that fact is
    missing (a pair without its PCIe level, a GPU without its NVLinks), with a warning.
    """
    devices = {}
    for uuid in uuids:
        try:
            devices[uuid] = nvml.device_by_uuid(uuid)
        except NvmlError as exc:
            log.warning("topology: device %s not found: %s", uuid, exc)
    out = []
    for uuid, dev in devices.items():
        try:
            bus = dev.pci_bus_id()
        except NvmlError as exc:
            log.warning("topology: no PCI bus id for %s: %s", uuid, exc)
            continue
        try:
            nvlinks = tuple(dev.nvlink_remotes())
        except NvmlError as exc:
            log.warning("topology: NVLinks of %s unreadable: %s", uuid, exc)
            nvlinks = ()
        levels = {}
        for peer, other in devices.items():
            if peer == uuid:
                continue
            try:
                levels[peer] = dev.topology_common_ancestor(other)
            except NvmlError as exc:
                log.warning("topology: common ancestor of %s and %s unknown: %s", uuid, peer, exc)
        out.append(GpuLinks(uuid, bus, nvlinks, levels))
    return out


def read_condition(nvml: Nvml, uuid: str, checks: frozenset[str]) -> Reading:
    """Poll the opted-in conditions of one device. Readings NVML does not support stay None."""
    try:
        dev = nvml.device_by_uuid(uuid)
    except NvmlError as exc:
        return Reading(lost=exc.code if isinstance(exc.code, str) else str(exc.code))
    failures: list[NvmlError] = []

    def read(fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except NvmlError as exc:
            failures.append(exc)
            return None

    reading = Reading(
        ecc_uncorrected=read(lambda: dev.total_ecc_errors(True)) if CHECK_ECC in checks else None,
        retired=read(dev.retired_pages) if CHECK_RETIRED_PAGES in checks else None,
        remapped=read(dev.remapped_rows) if CHECK_RETIRED_PAGES in checks else None,
        temperature=read(dev.temperature) if CHECK_TEMPERATURE in checks else None,
        slowdown=read(lambda: dev.temperature_threshold("slowdown")) if CHECK_TEMPERATURE in checks else None,
    )
    for failure in failures:
        if failure.code == "GPU_IS_LOST":  # the handle outlived the device
            return Reading(lost=failure.code)
        if failure.code != "NOT_SUPPORTED":
            log.v(4).info("health poll of %s: %s", uuid, failure)
    log.v(5).info("health poll of %s: %s", uuid, reading)
    return reading


class HealthChecker:
    """Waits on NVML events; a critical Xid marks its GPU unhealthy (sticky, see health.py). With
    opt-in ``checks`` it also polls every ``poll_s`` the conditions of health.py, which come and go.

    While the MIG apply lock file exists the loop does not consume events nor poll (HAMi stops it and
    restarts it afterwards); events queued meanwhile are judged when it resumes. HAMi waits 5 s per
    ``nvmlEventSetWait``; 0.5 s changes nothing but how fast a restart or shutdown is.
    """

    def __init__(
        self,
        nvml: Nvml,
        uuids: Sequence[str],
        policy: XidPolicy,
        *,
        checks: frozenset[str] = frozenset(),
        on_condition: Callable[[str, str, str | None], None],
        on_event: Callable[[str, str], None],
        paused: Callable[[], bool],
        wait_ms: int = 500,
        poll_s: float = 5.0,
    ) -> None:
        self._nvml = nvml
        self._uuids = list(uuids)
        self._policy = policy
        self._checks = checks
        self._on_condition = on_condition
        self._on_event = on_event
        self._paused = paused
        self._wait_ms = wait_ms
        self._poll_s = poll_s
        self._active: dict[str, dict[str, str]] = {u: {} for u in self._uuids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-health", daemon=True)

    def start(self) -> None:
        if self._policy.checks_disabled and not self._checks:
            log.info("Health checks disabled by DP_DISABLE_HEALTHCHECKS")
            return
        if self._checks:
            log.info("Health checks beyond Xids: %s", ",".join(sorted(self._checks)))
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _set(self, uuid: str, reason: str, detail: str | None) -> None:
        self._on_event(uuid, reason if detail is not None else "recovered")
        self._on_condition(uuid, reason, detail)

    def _run(self) -> None:
        events: NvmlEventSet | None = None
        if not self._policy.checks_disabled or CHECK_ECC in self._checks:
            try:
                events = self._nvml.event_set()
            except NvmlError as exc:
                log.warning("Failed to start health check: %s; continuing with health checks disabled", exc)
                if not self._checks:
                    return
        try:
            if events is not None:
                self._register(events)
            self._loop(events)
        finally:
            if events is not None:
                events.close()

    def _register(self, events: NvmlEventSet) -> None:
        for uuid in self._uuids:
            try:
                dev = self._nvml.device_by_uuid(uuid)
                events.register(dev, HEALTH_EVENTS & dev.supported_event_types())
            except NvmlError as exc:
                if exc.code == "NOT_SUPPORTED":
                    log.warning("Device %s is too old to support healthchecking.", uuid)
                    self._on_event(uuid, "not_supported")
                else:
                    log.error(
                        "Failed to register device %s for health checks: %s; marking it unhealthy", uuid, exc
                    )
                    self._set(uuid, REGISTRATION_FAILED, f"event registration failed: {exc}")

    def _loop(self, events: NvmlEventSet | None) -> None:
        paused = False
        deferred: list[XidEvent] = []  # events that arrived as a pause began: judged on resume
        next_poll = time.monotonic()
        while not self._stop.is_set():
            if self._paused():
                if not paused:
                    log.info("MIG apply lock file detected, pausing health checks")
                    paused = True
                self._stop.wait(self._wait_ms / 1000)
                continue
            if paused:
                log.info("MIG apply lock file removed, resuming health checks")
                paused = False
            while deferred and not self._paused():
                self._judge(deferred.pop(0))
            if self._checks and time.monotonic() >= next_poll:
                self._poll()
                next_poll = time.monotonic() + self._poll_s
            if events is None:
                self._stop.wait(self._wait_ms / 1000)
                continue
            try:
                ev = events.wait(self._wait_ms)
            except NvmlError as exc:
                log.error("Error waiting for NVML events: %s; marking all devices unhealthy", exc)
                for uuid in self._uuids:
                    self._set(uuid, WAIT_ERROR, f"NVML event wait failed: {exc}")
                self._stop.wait(self._wait_ms / 1000)  # a broken event set must not spin
                continue
            if ev is None:
                continue
            if self._paused():
                deferred.append(ev)
                continue
            self._judge(ev)

    def _poll(self) -> None:
        for uuid in self._uuids:
            before = self._active[uuid]
            after = judge(read_condition(self._nvml, uuid, self._checks), self._checks, before)
            self._apply(uuid, before, after)

    def _apply(self, uuid: str, before: dict[str, str], after: dict[str, str]) -> None:
        self._active[uuid] = after
        for reason in sorted(after.keys() - before.keys()):
            log.error("%s on Device=%s: %s; marking device as unhealthy.", reason, uuid, after[reason])
            self._set(uuid, reason, after[reason])
        for reason in sorted(before.keys() - after.keys()):
            log.info("%s cleared on Device=%s: NVML reports it recovered.", reason, uuid)
            self._set(uuid, reason, None)

    def _judge(self, ev: XidEvent) -> None:
        if ev.event_type == EVENT_DOUBLE_BIT_ECC and CHECK_ECC in self._checks:
            before = self._active.get(ev.device_uuid)
            if before is not None and ECC_DOUBLE_BIT not in before:
                self._apply(ev.device_uuid, before, {**before, ECC_DOUBLE_BIT: "double-bit ECC error event"})
            return
        if ev.event_type != EVENT_XID_CRITICAL:
            log.v(4).info("Skipping non-nvmlEventTypeXidCriticalError event: type=%d", ev.event_type)
            self._on_event(ev.device_uuid, "non_xid_skipped")
            return
        if self._policy.checks_disabled or not self._policy.is_critical(ev.xid):
            log.v(4).info("Skipping event Xid=%d on Device=%s (ignored Xid)", ev.xid, ev.device_uuid)
            self._on_event(ev.device_uuid, "xid_ignored")
            return
        log.info(
            "XidCriticalError: Xid=%d on Device=%s; marking device as unhealthy.", ev.xid, ev.device_uuid
        )
        self._set(ev.device_uuid, XID_CRITICAL, f"critical Xid {ev.xid}")
