"""Physical GPU readings through ``hami.core.nvml``: one session for the process's life.

A failing call drops only its own series and is counted by NVML function name; a device whose
handle or UUID cannot be had is skipped for that scrape. Critical Xid events are counted by a
watcher thread and mark the GPU unhealthy (application Xids are ignored, as HAMi's health check
does, §C.9).

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from hami.core import klog
from hami.core.nvml import EVENT_XID_CRITICAL, Nvml, NvmlDevice, NvmlError
from hami.exporter.view import HostDevice, MigIdentity, registered_type

log = klog.get_logger(__name__)
IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})  # application errors, never a GPU fault
T = TypeVar("T")
# Every NVML call the monitor makes (its own, the driver reader's and through ``hami.core.nvml``'s MIG
# walk): the bounded label set of hami_monitor_nvml_errors_total{call}, exported at 0 from the start so
# that increase() sees a first failure.
NVML_CALLS = (
    "nvmlInit",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetTemperatureThreshold",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait",
    "nvmlDeviceGetMemoryLimits_v1",  # the driver's per-container accounting (hami.exporter.driver)
)


def mig_profile(name: str) -> str:
    """``NVIDIA A100-SXM4-40GB MIG 1g.5gb`` -> ``1g.5gb`` (NVML names MIG devices by model + profile)."""
    return name.rpartition(" MIG ")[2] or name


class HostReader:
    def __init__(self, nvml: Nvml, on_error: Callable[[list[str]], None]) -> None:
        self._nvml = nvml
        self._on_error = on_error
        self._lock = threading.Lock()
        self._xids: Counter[str] = Counter()  # by device uuid
        self._unhealthy: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _try(self, errors: list[str], call: Callable[[], T]) -> T | None:
        try:
            return call()
        except NvmlError as err:
            if err.code != "NOT_SUPPORTED":  # unified-memory GPUs etc.: silently absent, as in HAMi
                errors.append(err.call)
            return None

    def read(self) -> tuple[HostDevice, ...]:
        errors: list[str] = []
        out: list[HostDevice] = []
        count = self._try(errors, self._nvml.device_count) or 0
        for i in range(count):
            dev = self._try(errors, lambda i=i: self._nvml.device(i))  # type: ignore[misc]
            if dev is not None:
                host = self._read_device(i, dev, errors)
                if host is not None:
                    out.append(host)
        if errors:
            self._on_error(errors)
        return tuple(out)

    def _read_device(self, i: int, dev: NvmlDevice, errors: list[str]) -> HostDevice | None:
        uuid = self._try(errors, dev.uuid)
        name = self._try(errors, dev.name)
        if uuid is None or name is None:
            log.warning("Failed to collect metrics for GPU device %d", i)
            return None
        mem = self._try(errors, dev.memory_info)
        util = self._try(errors, dev.utilization_rates)
        power = self._try(errors, dev.power_usage)
        migs = self._try(errors, dev.mig_devices) or []
        procs = self._try(errors, dev.compute_running_processes)
        pci = self._try(errors, dev.pci_bus_id)
        with self._lock:
            xids, healthy = self._xids[uuid], uuid not in self._unhealthy
        return HostDevice(
            index=i,
            uuid=uuid,
            type=registered_type(name),
            memory_used=None if mem is None else mem.used,
            memory_total=None if mem is None else mem.total,
            util_gpu=None if util is None else util.gpu,
            util_memory=None if util is None else util.memory,
            temperature=self._try(errors, dev.temperature),
            power_watts=None if power is None else power / 1000.0,
            ecc_corrected=self._try(errors, lambda: dev.total_ecc_errors(False)),
            ecc_uncorrected=self._try(errors, lambda: dev.total_ecc_errors(True)),
            temperature_slowdown=self._try(errors, lambda: dev.temperature_threshold("slowdown")),
            retired=self._try(errors, dev.retired_pages),
            remapped=self._try(errors, dev.remapped_rows),
            clock_event_reasons=self._try(errors, dev.clock_event_reasons),
            xid_errors=xids,
            healthy=healthy,
            migs=tuple(
                MigIdentity(m.uuid, mig_profile(m.name), m.gpu_instance_id, m.compute_instance_id)
                for m in migs
            ),
            pids=tuple(p.pid for p in procs or [] if p.pid > 0),
            # One process whose memory NVML cannot report makes the sum unknown, not smaller.
            process_memory=None
            if procs is None or any(p.used_memory is None for p in procs)
            else sum(p.used_memory or 0 for p in procs),
            pci_bus_id=pci or "",
        )

    def start_xid_watch(self) -> None:
        """Register every GPU for critical Xid events and count them in a background thread."""
        errors: list[str] = []
        events = self._try(errors, self._nvml.event_set)
        if events is None:
            self._on_error(errors)
            return
        for i in range(self._try(errors, self._nvml.device_count) or 0):
            dev = self._try(errors, lambda i=i: self._nvml.device(i))  # type: ignore[misc]
            if dev is not None:
                self._try(errors, lambda dev=dev: events.register(dev, EVENT_XID_CRITICAL))  # type: ignore[misc]
        if errors:
            self._on_error(errors)

        def run() -> None:
            while not self._stop.is_set():
                errs: list[str] = []
                ev = self._try(errs, lambda: events.wait(1000))
                if errs:
                    self._on_error(errs)
                    self._stop.wait(1.0)
                if ev is None or ev.event_type != EVENT_XID_CRITICAL or ev.xid in IGNORED_XIDS:
                    continue
                log.error("XidCriticalError: Xid=%d on Device=%s", ev.xid, ev.device_uuid)
                with self._lock:
                    self._xids[ev.device_uuid] += 1
                    self._unhealthy.add(ev.device_uuid)
            events.close()

        self._thread = threading.Thread(target=run, name="xid-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
