"""The NVML edge: GPU facts for registration (§C.3–§C.4) and the Xid health loop (§C.9).

Section signs (§) refer to docs/design/node-agent.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from hami.core import klog
from hami.core.nvml import EVENT_XID_CRITICAL, HEALTH_EVENTS, Nvml, NvmlError, NvmlEventSet, XidEvent
from hami.deviceplugin.health import XidPolicy
from hami.deviceplugin.inventory import GpuFacts, numa_from_sysfs_text, pci_sysfs_id

log = klog.get_logger(__name__)


def _numa(dev_numa: Callable[[], int], bus_id: Callable[[], str], sysfs: Path) -> int:
    """NVML's NUMA node; else HAMi's sysfs read of ``numa_node``; 0 when neither answers."""
    try:
        return max(dev_numa(), 0)
    except NvmlError:
        pass
    try:
        path = sysfs / "bus" / "pci" / "devices" / pci_sysfs_id(bus_id()) / "numa_node"
        return numa_from_sysfs_text(path.read_text())
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
        facts.append(
            GpuFacts(
                uuid=uuid,
                index=dev.index,
                name=dev.name(),
                memory_total=total,
                numa=_numa(dev.numa_node_id, dev.pci_bus_id, sysfs),
                minor=_minor(dev.minor_number, dev.index),
            )
        )
    return facts


class HealthChecker:
    """Waits on NVML events; a critical Xid marks its GPU unhealthy (sticky, see health.py).

    While the MIG apply lock file exists the loop does not consume events (HAMi stops it and
    restarts it afterwards); events queued meanwhile are judged when it resumes. HAMi waits 5 s per
    ``nvmlEventSetWait``; 0.5 s changes nothing but how fast a restart or shutdown is.
    """

    def __init__(
        self,
        nvml: Nvml,
        uuids: Sequence[str],
        policy: XidPolicy,
        *,
        on_unhealthy: Callable[[str], None],
        on_event: Callable[[str, str], None],
        paused: Callable[[], bool],
        wait_ms: int = 500,
    ) -> None:
        self._nvml = nvml
        self._uuids = list(uuids)
        self._policy = policy
        self._on_unhealthy = on_unhealthy
        self._on_event = on_event
        self._paused = paused
        self._wait_ms = wait_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-health", daemon=True)

    def start(self) -> None:
        if self._policy.checks_disabled:
            log.info("Health checks disabled by DP_DISABLE_HEALTHCHECKS")
            return
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _unhealthy(self, uuid: str, event: str) -> None:
        self._on_event(uuid, event)
        self._on_unhealthy(uuid)

    def _run(self) -> None:
        try:
            events = self._nvml.event_set()
        except NvmlError as exc:
            log.error("Failed to start health check: %s; continuing with health checks disabled", exc)
            return
        try:
            self._register(events)
            self._loop(events)
        finally:
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
                    self._unhealthy(uuid, "registration_failed")

    def _loop(self, events: NvmlEventSet) -> None:
        paused = False
        deferred: list[XidEvent] = []  # events that arrived as a pause began: judged on resume
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
            try:
                ev = events.wait(self._wait_ms)
            except NvmlError as exc:
                log.error("Error waiting for NVML events: %s; marking all devices unhealthy", exc)
                for uuid in self._uuids:
                    self._unhealthy(uuid, "wait_error")
                self._stop.wait(self._wait_ms / 1000)  # a broken event set must not spin
                continue
            if ev is None:
                continue
            if self._paused():
                deferred.append(ev)
                continue
            self._judge(ev)

    def _judge(self, ev: XidEvent) -> None:
        if ev.event_type != EVENT_XID_CRITICAL:
            log.v(4).info("Skipping non-nvmlEventTypeXidCriticalError event: type=%d", ev.event_type)
            self._on_event(ev.device_uuid, "non_xid_skipped")
            return
        if not self._policy.is_critical(ev.xid):
            log.v(4).info("Skipping event Xid=%d on Device=%s (ignored Xid)", ev.xid, ev.device_uuid)
            self._on_event(ev.device_uuid, "xid_ignored")
            return
        log.info(
            "XidCriticalError: Xid=%d on Device=%s; marking device as unhealthy.", ev.xid, ev.device_uuid
        )
        self._unhealthy(ev.device_uuid, "xid_critical")
