"""The monitor's GPU and container families, each declared once with where its series come from,
built fresh on every scrape from a ``NodeView`` (pure; ``hami.exporter.view`` holds the readings).

Names HAMi v2.10 exports keep HAMi's name, type, help and value semantics (§B.2), including
its 0-100 scale on ``*_utilization_ratio``; they gain the contract's ``node`` join label. Every
family carries HAMi's ``zone="vGPU"``. ``device_type`` is the registered type string
(``NVIDIA-`` prefixed only when the model lacks it), never double-prefixed.

``GPU`` holds every family here in exposition order, in the order declared. A family declared with
``_host`` comes with its series per GPU, one declared with ``_ctr`` with its value per container
device: both paths of a scrape (rows for ``collect()``, ``ContainerText``'s kept lines for a
rendered one) read them from ``HOST`` and ``CONTAINER`` (docs/design/metric-families.md).

Section signs (§) refer to docs/design/node-agent-monitor.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from hami.core.nvml import CLOCK_EVENT_REASONS
from hami.core.serve.families import Catalogue, Declared, Labels, Scrape
from hami.exporter.attribution import ContainerView
from hami.exporter.region.parse import DeviceUsage
from hami.exporter.view import HostDevice, NodeView

ZONE = "vGPU"
HOST_LABELS = ("node", "device_index", "device_uuid", "device_type", "zone")
CTR_LABELS = ("namespace", "pod", "container", "vdevice_index", "device_uuid", "node", "zone")
LEGACY_HOST = ("nodeid", "deviceidx", "deviceuuid", "devicetype", "zone")
LEGACY_CTR = ("podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid", "zone")

Series = Iterable[tuple[Labels, float]]


class HostColumn(NamedTuple):
    """A family's series of one GPU, from the GPU and its ``HOST_LABELS`` values."""

    declared: Declared
    series: Callable[[HostDevice, Labels], Series]


def _reading(read: Callable[[HostDevice], float | None]) -> Callable[[HostDevice, Labels], Series]:
    """One series per GPU; none where the NVML call failed (``None``)."""
    def series(h: HostDevice, lv: Labels) -> Series:
        value = read(h)
        return () if value is None else ((lv, value),)
    return series


def _by(reads: dict[str, Callable[[HostDevice], float | None]]) -> Callable[[HostDevice, Labels], Series]:
    """One series per value of the family's last label, each where its reading is known."""
    def series(h: HostDevice, lv: Labels) -> Series:
        return [((*lv, value), n) for value, read in reads.items() if (n := read(h)) is not None]
    return series


def _flag(read: Callable[[HostDevice], bool | None]) -> Callable[[HostDevice], int | None]:
    return lambda h: None if (v := read(h)) is None else int(v)


def _throttle(h: HostDevice, lv: Labels) -> Series:
    reasons = h.clock_event_reasons
    if reasons is None:
        return ()
    return [((*lv, reason), 1 if reasons & bit else 0) for bit, reason in CLOCK_EVENT_REASONS.items()]


def _migs(h: HostDevice, lv: Labels) -> Series:
    return [((*lv, m.uuid, m.profile, str(m.gpu_instance_id), str(m.compute_instance_id)), 1) for m in h.migs]


# Every family of this module, in exposition order (the order declared).
GPU = Catalogue()
HOST: list[HostColumn] = []


def _host(declared: Declared, series: Callable[[HostDevice, Labels], Series]) -> None:
    HOST.append(HostColumn(declared, series))


_g, _c = GPU.gauge, GPU.counter
_host(_g("hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes", HOST_LABELS),
      _reading(lambda h: h.memory_used))
_host(_g("hami_host_gpu_memory_total_bytes", "GPU device memory size in bytes", HOST_LABELS),
      _reading(lambda h: h.memory_total))
_host(_g("hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100)", HOST_LABELS),
      _reading(lambda h: h.util_gpu))
_host(_g("hami_host_gpu_memory_controller_utilization_ratio",
         "GPU memory controller utilization ratio (0-100)",
         HOST_LABELS), _reading(lambda h: h.util_memory))
_host(_g("hami_host_gpu_temperature_celsius", "GPU core temperature in degrees Celsius", HOST_LABELS),
      _reading(lambda h: h.temperature))
_host(_g("hami_host_gpu_temperature_slowdown_threshold_celsius",
         "Temperature at which the GPU slows its clocks down, in degrees Celsius", HOST_LABELS),
      _reading(lambda h: h.temperature_slowdown))
_host(_g("hami_host_gpu_power_watts", "GPU power draw in watts", HOST_LABELS),
      _reading(lambda h: h.power_watts))
# HAMi's name for the same reading since v2.10 (its master; the next release carries it).
_host(_g("hami_host_gpu_power_usage_watts", "GPU power usage in watts", HOST_LABELS),
      _reading(lambda h: h.power_watts))
_host(_g("hami_host_gpu_health", "1 if the GPU is healthy (no critical Xid seen, NVML answers)", HOST_LABELS),
      _reading(lambda h: 1 if h.healthy else 0))
_host(_c("hami_host_gpu_xid_errors", "Critical Xid events seen since the monitor started", HOST_LABELS),
      _reading(lambda h: h.xid_errors))
_host(_c("hami_host_gpu_ecc_errors",
         "ECC errors since the driver loaded (volatile), by error_type corrected/uncorrected",
         (*HOST_LABELS, "error_type")),
      _by({"corrected": lambda h: h.ecc_corrected, "uncorrected": lambda h: h.ecc_uncorrected}))
_host(_g("hami_host_gpu_retired_pages",
         "Framebuffer pages retired by the driver (before Ampere), by cause single_bit/double_bit",
         (*HOST_LABELS, "cause")),
      _by({"single_bit": lambda h: None if h.retired is None else h.retired.single_bit,
           "double_bit": lambda h: None if h.retired is None else h.retired.double_bit}))
_host(_g("hami_host_gpu_retired_pages_pending",
         "1 while a page retirement waits for a GPU reset or reboot, else 0",
         HOST_LABELS), _reading(_flag(lambda h: None if h.retired is None else h.retired.pending)))
_host(_g("hami_host_gpu_remapped_rows",
         "Memory rows remapped (Ampere and later), by the error type correctable/uncorrectable",
         (*HOST_LABELS, "type")),
      _by({"correctable": lambda h: None if h.remapped is None else h.remapped.correctable,
           "uncorrectable": lambda h: None if h.remapped is None else h.remapped.uncorrectable}))
_host(_g("hami_host_gpu_row_remap_pending", "1 while a row remap waits for a GPU reset, else 0", HOST_LABELS),
      _reading(_flag(lambda h: None if h.remapped is None else h.remapped.pending)))
_host(_g("hami_host_gpu_row_remap_failure", "1 when a row remap failed (the GPU needs service), else 0",
         HOST_LABELS), _reading(_flag(lambda h: None if h.remapped is None else h.remapped.failure)))
_host(_g("hami_host_gpu_clock_throttle_active",
         "1 while NVML reports this clock throttle reason active on the GPU, else 0",
         (*HOST_LABELS, "reason")),
      _throttle)
_host(_g("hami_host_gpu_mig_device_info", "MIG instances present on the GPU, from NVML",
         (*HOST_LABELS, "mig_uuid", "profile", "gpu_instance_id", "compute_instance_id")), _migs)
_host(_g("HostGPUMemoryUsage", "GPU device memory usage", LEGACY_HOST, legacy=True),
      _reading(lambda h: h.memory_used))
_host(_g("HostCoreUtilization", "GPU core utilization", LEGACY_HOST, legacy=True),
      _reading(lambda h: h.util_gpu))


def host_series(view: NodeView, fams: Scrape) -> None:
    for column in HOST:
        fam = fams.get(column.declared)
        if fam is None:  # a legacy family, not exported
            continue
        for h in view.hosts:
            for labels, value in column.series(h, (view.node, str(h.index), h.uuid, h.type, ZONE)):
                fam.add(labels, value)


class ContainerColumn(NamedTuple):
    """A family with one series per container device (labels: ``device_labels``), and its value."""

    declared: Declared
    value: Callable[[ContainerView, DeviceUsage], int]


CONTAINER: list[ContainerColumn] = []


def _ctr(name: str, doc: str, value: Callable[[ContainerView, DeviceUsage], int]) -> None:
    CONTAINER.append(ContainerColumn(_g(name, doc, CTR_LABELS), value))


_ctr("hami_vgpu_memory_used_bytes", "vGPU device memory usage in bytes (HAMi-core accounting)",
     lambda c, d: d.used_bytes)
_ctr("hami_vgpu_memory_limit_bytes", "vGPU device memory limit in bytes (0 = unlimited)",
     lambda c, d: d.limit_bytes)
_ctr("hami_vgpu_memory_over_limit",
     "1 while the container's device memory use exceeds its vGPU limit "
     "(hami_vgpu_memory_used_bytes then reads the limit), else 0",
     lambda c, d: 1 if d.over_limit else 0)
_ctr("hami_container_device_memory_bytes", "Container device memory usage in bytes",
     lambda c, d: d.used_bytes)
# HAMi's meaning: the raw sum over the container's processes, which can exceed 100.
_ctr("hami_container_device_utilization_ratio",
     "Container device SM utilization ratio: the sum of its processes' SM use (0-100 each, so the "
     "sum can exceed 100)",
     lambda c, d: d.sm_util_sum)
_ctr("hami_vgpu_memory_context_bytes", "Container device memory context size in bytes",
     lambda c, d: d.context_bytes)
_ctr("hami_vgpu_memory_module_bytes", "Container device memory module size in bytes",
     lambda c, d: d.module_bytes)
_ctr("hami_vgpu_memory_buffer_bytes", "Container device memory buffer size in bytes",
     lambda c, d: d.buffer_bytes)
_ctr("hami_vgpu_core_used_percent", "Container SM utilization in percent (0-100, clamped)",
     lambda c, d: d.sm_util_percent)
_ctr("hami_vgpu_core_limit_percent", "Container SM limit in percent (0-100; unlimited reads 100)",
     lambda c, d: d.sm_limit_percent)
_ctr("hami_vgpu_processes", "Live processes in the container's shared region", lambda c, d: c.processes)
# Moves with the clock, not with the region: ``kernel_age``, per container device.
KERNEL_AGE = _g(
    "hami_container_last_kernel_elapsed_seconds",
    "Seconds since last kernel execution in container", CTR_LABELS
)
# HAMi's pre-v2.8 container families (``--legacy-metrics``), filled in ``legacy_container_series``.
LEGACY_USED = _g("vGPU_device_memory_usage_in_bytes", "vGPU device usage", LEGACY_CTR, legacy=True)
LEGACY_LIMIT = _g("vGPU_device_memory_limit_in_bytes", "vGPU device limit", LEGACY_CTR, legacy=True)
LEGACY_DESC = _g(
    "Device_memory_desc_of_container",
    "Container device memory description",
    (*LEGACY_CTR, "context", "module", "data", "offset"),
    legacy=True,
)
LEGACY_UTIL = _g(
    "Device_utilization_desc_of_container",
    "Container device utilization description", LEGACY_CTR, legacy=True
)
LEGACY_KERNEL = _g(
    "Device_last_kernel_of_container", "Container device last kernel description", LEGACY_CTR, legacy=True
)


def device_labels(c: ContainerView, d: DeviceUsage, node: str) -> Labels:
    """The ``CTR_LABELS`` values of one container device."""
    return (c.namespace, c.pod, c.container, str(d.index), d.uuid, node, ZONE)


def device_values(c: ContainerView, d: DeviceUsage) -> tuple[int, ...]:
    """One container device's value in each ``CONTAINER`` family, in that order."""
    return tuple([column.value(c, d) for column in CONTAINER])


def kernel_age(view: NodeView, c: ContainerView) -> float | None:
    """Seconds since the container's last kernel, None when it never ran one (no series)."""
    return max(view.now - c.last_kernel_time, 0.0) if c.last_kernel_time > 0 else None


def container_rows(view: NodeView, fams: Scrape) -> None:
    """The ``CONTAINER`` families' and the kernel age's series as rows (the ``collect()`` path)."""
    rows = [fams[c.declared].rows for c in CONTAINER]  # appended to directly: per device per scrape
    elapsed = fams[KERNEL_AGE]
    for c in view.containers:
        since = kernel_age(view, c)
        for d in c.devices:
            lv = device_labels(c, d, view.node)
            for out_rows, value in zip(rows, device_values(c, d), strict=True):
                out_rows.append((CTR_LABELS, lv, value))
            if since is not None:
                elapsed.add(lv, since)


def legacy_container_series(view: NodeView, fams: Scrape) -> None:
    """HAMi's pre-v2.8 container families, where the scrape exports them (``--legacy-metrics``)."""
    lused, llimit, ldesc = fams.get(LEGACY_USED), fams.get(LEGACY_LIMIT), fams.get(LEGACY_DESC)
    lutil, lkern = fams.get(LEGACY_UTIL), fams.get(LEGACY_KERNEL)
    if lused is None or llimit is None or ldesc is None or lutil is None or lkern is None:
        return
    for c in view.containers:
        since = kernel_age(view, c)
        for d in c.devices:
            llv = (c.namespace, c.pod, c.container, str(d.index), d.uuid, ZONE)
            lused.add(llv, d.used_bytes)
            llimit.add(llv, d.limit_bytes)
            # HAMi's offset label is total - context - module - data in uint64 (it can wrap)
            off = (d.used_bytes - d.context_bytes - d.module_bytes - d.buffer_bytes) % 2**64
            ldesc.add(
                (*llv, str(d.context_bytes), str(d.module_bytes), str(d.buffer_bytes), str(off)),
                d.used_bytes,
            )
            lutil.add(llv, d.sm_util_sum)
            if since is not None:
                lkern.add(llv, since)
