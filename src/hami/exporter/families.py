"""The monitor's metric families, built fresh on every scrape from a ``NodeView`` (pure;
``hami.exporter.view`` holds the readings).

Names HAMi v2.10 exports keep HAMi's name, type, help and value semantics (§B.2), including
its 0-100 scale on ``*_utilization_ratio``; they gain the contract's ``node`` join label. Every
family carries HAMi's ``zone="vGPU"``. ``device_type`` is the registered type string
(``NVIDIA-`` prefixed only when the model lacks it), never double-prefixed.

Section signs (§) refer to docs/design/node-agent-monitor.md.
"""

from __future__ import annotations

from collections.abc import Iterable

from hami.core.nvml import CLOCK_EVENT_REASONS
from hami.core.serve.families import Family, Labels
from hami.exporter.attribution import ContainerView
from hami.exporter.region.parse import DeviceUsage
from hami.exporter.view import Counters, NodeView

ZONE = "vGPU"
HOST_LABELS = ("node", "device_index", "device_uuid", "device_type", "zone")
CTR_LABELS = ("namespace", "pod", "container", "vdevice_index", "device_uuid", "node", "zone")
LEGACY_HOST = ("nodeid", "deviceidx", "deviceuuid", "devicetype", "zone")
LEGACY_CTR = ("podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid", "zone")
REGION_STATES = ("ok", "initialising", "skipped")


def _g(name: str, doc: str, labels: tuple[str, ...]) -> Family:
    return Family(name, "gauge", doc, labels)


def _c(name: str, doc: str, labels: tuple[str, ...]) -> Family:
    return Family(name, "counter", doc, labels)


def host_families(view: NodeView, legacy: bool) -> list[Family]:
    mem = _g("hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes", HOST_LABELS)
    total = _g("hami_host_gpu_memory_total_bytes", "GPU device memory size in bytes", HOST_LABELS)
    util = _g("hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100)", HOST_LABELS)
    mcu = _g(
        "hami_host_gpu_memory_controller_utilization_ratio",
        "GPU memory controller utilization ratio (0-100)",
        HOST_LABELS,
    )
    temp = _g("hami_host_gpu_temperature_celsius", "GPU core temperature in degrees Celsius", HOST_LABELS)
    power = _g("hami_host_gpu_power_watts", "GPU power draw in watts", HOST_LABELS)
    # HAMi's name for the same reading since v2.10 (its master; the next release carries it).
    power_usage = _g("hami_host_gpu_power_usage_watts", "GPU power usage in watts", HOST_LABELS)
    health = _g(
        "hami_host_gpu_health", "1 if the GPU is healthy (no critical Xid seen, NVML answers)", HOST_LABELS
    )
    xid = _c("hami_host_gpu_xid_errors", "Critical Xid events seen since the monitor started", HOST_LABELS)
    ecc = _c(
        "hami_host_gpu_ecc_errors",
        "ECC errors since the driver loaded (volatile), by error_type corrected/uncorrected",
        (*HOST_LABELS, "error_type"),
    )
    mig = _g(
        "hami_host_gpu_mig_device_info",
        "MIG instances present on the GPU, from NVML",
        (*HOST_LABELS, "mig_uuid", "profile", "gpu_instance_id", "compute_instance_id"),
    )
    slowdown = _g(
        "hami_host_gpu_temperature_slowdown_threshold_celsius",
        "Temperature at which the GPU slows its clocks down, in degrees Celsius",
        HOST_LABELS,
    )
    retired = _g(
        "hami_host_gpu_retired_pages",
        "Framebuffer pages retired by the driver (before Ampere), by cause single_bit/double_bit",
        (*HOST_LABELS, "cause"),
    )
    retired_pending = _g(
        "hami_host_gpu_retired_pages_pending",
        "1 while a page retirement waits for a GPU reset or reboot, else 0",
        HOST_LABELS,
    )
    remapped = _g(
        "hami_host_gpu_remapped_rows",
        "Memory rows remapped (Ampere and later), by the error type correctable/uncorrectable",
        (*HOST_LABELS, "type"),
    )
    remap_pending = _g(
        "hami_host_gpu_row_remap_pending", "1 while a row remap waits for a GPU reset, else 0", HOST_LABELS
    )
    remap_failure = _g(
        "hami_host_gpu_row_remap_failure",
        "1 when a row remap failed (the GPU needs service), else 0",
        HOST_LABELS,
    )
    throttle = _g(
        "hami_host_gpu_clock_throttle_active",
        "1 while NVML reports this clock throttle reason active on the GPU, else 0",
        (*HOST_LABELS, "reason"),
    )
    out: list[Family] = [
        mem,
        total,
        util,
        mcu,
        temp,
        slowdown,
        power,
        power_usage,
        health,
        xid,
        ecc,
        retired,
        retired_pending,
        remapped,
        remap_pending,
        remap_failure,
        throttle,
        mig,
    ]
    lmem = _g("HostGPUMemoryUsage", "GPU device memory usage", LEGACY_HOST)
    lutil = _g("HostCoreUtilization", "GPU core utilization", LEGACY_HOST)
    for h in view.hosts:
        lv = (view.node, str(h.index), h.uuid, h.type, ZONE)
        for fam, value in (
            (mem, h.memory_used),
            (total, h.memory_total),
            (util, h.util_gpu),
            (mcu, h.util_memory),
            (temp, h.temperature),
            (slowdown, h.temperature_slowdown),
            (power, h.power_watts),
            (power_usage, h.power_watts),
        ):
            if value is not None:
                fam.add(lv, value)
        health.add(lv, 1 if h.healthy else 0)
        xid.add(lv, h.xid_errors)
        for kind, count in (("corrected", h.ecc_corrected), ("uncorrected", h.ecc_uncorrected)):
            if count is not None:
                ecc.add((*lv, kind), count)
        if h.retired is not None:
            retired.add((*lv, "single_bit"), h.retired.single_bit)
            retired.add((*lv, "double_bit"), h.retired.double_bit)
            retired_pending.add(lv, 1 if h.retired.pending else 0)
        if h.remapped is not None:
            remapped.add((*lv, "correctable"), h.remapped.correctable)
            remapped.add((*lv, "uncorrectable"), h.remapped.uncorrectable)
            remap_pending.add(lv, 1 if h.remapped.pending else 0)
            remap_failure.add(lv, 1 if h.remapped.failure else 0)
        if h.clock_event_reasons is not None:
            for bit, reason in CLOCK_EVENT_REASONS.items():
                throttle.add((*lv, reason), 1 if h.clock_event_reasons & bit else 0)
        for m in h.migs:
            mig.add((*lv, m.uuid, m.profile, str(m.gpu_instance_id), str(m.compute_instance_id)), 1)
        if h.memory_used is not None:
            lmem.add(lv, h.memory_used)
        if h.util_gpu is not None:
            lutil.add(lv, h.util_gpu)
    return [*out, lmem, lutil] if legacy else out


_CTR = (
    # name, help; each one's value per container device is ``device_values``'s, in this order
    ("hami_vgpu_memory_used_bytes", "vGPU device memory usage in bytes (HAMi-core accounting)"),
    ("hami_vgpu_memory_limit_bytes", "vGPU device memory limit in bytes (0 = unlimited)"),
    (
        "hami_vgpu_memory_over_limit",
        "1 while the container's device memory use exceeds its vGPU limit "
        "(hami_vgpu_memory_used_bytes then reads the limit), else 0",
    ),
    ("hami_container_device_memory_bytes", "Container device memory usage in bytes"),
    # HAMi's meaning: the raw sum over the container's processes, which can exceed 100.
    (
        "hami_container_device_utilization_ratio",
        "Container device SM utilization ratio: the sum of its processes' SM use (0-100 each, so the "
        "sum can exceed 100)",
    ),
    ("hami_vgpu_memory_context_bytes", "Container device memory context size in bytes"),
    ("hami_vgpu_memory_module_bytes", "Container device memory module size in bytes"),
    ("hami_vgpu_memory_buffer_bytes", "Container device memory buffer size in bytes"),
    ("hami_vgpu_core_used_percent", "Container SM utilization in percent (0-100, clamped)"),
    (
        "hami_vgpu_core_limit_percent",
        "Container SM limit in percent (0-100; unlimited reads 100)",
    ),
    ("hami_vgpu_processes", "Live processes in the container's shared region"),
)


def container_defs() -> list[Family]:
    """The container families without samples: one per ``_CTR`` entry, then the kernel's age."""
    fams = [_g(name, doc, CTR_LABELS) for name, doc in _CTR]
    elapsed = _g(
        "hami_container_last_kernel_elapsed_seconds",
        "Seconds since last kernel execution in container",
        CTR_LABELS,
    )
    return [*fams, elapsed]


def device_labels(c: ContainerView, d: DeviceUsage, node: str) -> Labels:
    """The ``CTR_LABELS`` values of one container device."""
    return (c.namespace, c.pod, c.container, str(d.index), d.uuid, node, ZONE)


def device_values(c: ContainerView, d: DeviceUsage) -> tuple[int, ...]:
    """One container device's value in each ``_CTR`` family, in that order."""
    return (
        d.used_bytes,
        d.limit_bytes,
        1 if d.over_limit else 0,
        d.used_bytes,
        d.sm_util_sum,
        d.context_bytes,
        d.module_bytes,
        d.buffer_bytes,
        d.sm_util_percent,
        d.sm_limit_percent,
        c.processes,
    )


def kernel_age(view: NodeView, c: ContainerView) -> float | None:
    """Seconds since the container's last kernel, None when it never ran one (no series)."""
    return max(view.now - c.last_kernel_time, 0.0) if c.last_kernel_time > 0 else None


def container_families(view: NodeView, legacy: bool) -> list[Family]:
    defs = container_defs()
    rows = [f.rows for f in defs[:-1]]  # appended to directly: this loop runs per device per scrape
    elapsed = defs[-1]
    for c in view.containers:
        since = kernel_age(view, c)
        for d in c.devices:
            lv = device_labels(c, d, view.node)
            for out_rows, value in zip(rows, device_values(c, d), strict=True):
                out_rows.append((CTR_LABELS, lv, value))
            if since is not None:
                elapsed.add(lv, since)
    return [*defs, *legacy_container_families(view)] if legacy else defs


def legacy_container_families(view: NodeView) -> list[Family]:
    """HAMi's pre-v2.8 container families (``--legacy-metrics``)."""
    lused = _g("vGPU_device_memory_usage_in_bytes", "vGPU device usage", LEGACY_CTR)
    llimit = _g("vGPU_device_memory_limit_in_bytes", "vGPU device limit", LEGACY_CTR)
    ldesc = _g(
        "Device_memory_desc_of_container",
        "Container device memory description",
        (*LEGACY_CTR, "context", "module", "data", "offset"),
    )
    lutil = _g("Device_utilization_desc_of_container", "Container device utilization description", LEGACY_CTR)
    lkern = _g("Device_last_kernel_of_container", "Container device last kernel description", LEGACY_CTR)
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
    return [lused, llimit, ldesc, lutil, lkern]


UNLIMITED_LABELS = ("namespace", "pod", "container", "node", "zone", "reason")


def unlimited_families(view: NodeView) -> list[Family]:
    """``hami_vgpu_unlimited_processes``: the guide's "GPU not limited" branch, counted."""
    fam = _g(
        "hami_vgpu_unlimited_processes",
        "GPU processes of a container given HAMi vGPUs that run without HAMi-core (no memory or core "
        "limit), by reason control_disabled/no_cache_dir/no_region",
        UNLIMITED_LABELS,
    )
    for u in view.unlimited:
        fam.add((u.namespace, u.pod, u.container, view.node, ZONE, u.reason), u.processes)
    return [fam]


MIG_LABELS = (*CTR_LABELS, "mig_uuid", "profile", "gpu_instance_id", "compute_instance_id")
LEGACY_MIG = (*LEGACY_CTR, "instanceid")


def _mig_defs() -> tuple[Family, Family]:
    return (
        _g("hami_mig_device_info", "MIG runtime identity for a container allocation", MIG_LABELS),
        _g("MigInfo", "Mig device information for container", LEGACY_MIG),
    )


def mig_families(view: NodeView, legacy: bool) -> list[Family]:
    """``hami_mig_device_info`` (and legacy ``MigInfo``), only on a node with MIG allocations."""
    if not view.migs:
        return []
    info, linfo = _mig_defs()
    for m in view.migs:
        base = (m.namespace, m.pod, m.container, str(m.vdevice_index), m.device_uuid)
        identity = (m.mig_uuid, m.profile, str(m.gpu_instance_id), str(m.compute_instance_id))
        info.add((*base, view.node, ZONE, *identity), 1)
        linfo.add((*base, ZONE, str(m.gpu_instance_id)), 1)
    return [info, linfo] if legacy else [info]


def self_families(
    view: NodeView, counters: Counters, reasons: Iterable[str], calls: Iterable[str] = ()
) -> list[Family]:
    """The monitor's own health; node-scoped, so every series carries ``node`` (contract rule 4).
    Every skip reason and every NVML call in ``calls`` is exported from the start, at 0 until met."""
    regions = _g(
        "hami_monitor_regions", "Container regions by state at this scrape", ("state", "node", "zone")
    )
    for state in REGION_STATES:
        regions.add((state, view.node, ZONE), view.regions.get(state, 0))
    skips = _c(
        "hami_monitor_region_skips",
        "Times a region started being skipped or clamped for a reason (a region that stays broken "
        "counts once)",
        ("reason", "node", "zone"),
    )
    skipped = _g(
        "hami_monitor_regions_skipped",
        "Regions skipped or clamped at this scrape, by reason",
        ("reason", "node", "zone"),
    )
    for reason in reasons:
        skips.add((reason, view.node, ZONE), counters.region_skips.get(reason, 0))
        skipped.add((reason, view.node, ZONE), view.skipped.get(reason, 0))
    nvml = _c("hami_monitor_nvml_errors", "Failed NVML calls, by call", ("call", "node", "zone"))
    for call in sorted({*calls, *counters.nvml_errors}):
        nvml.add((call, view.node, ZONE), counters.nvml_errors.get(call, 0))
    return [regions, skips, skipped, nvml]


def inconsistency_families(view: NodeView, kinds: Iterable[str]) -> list[Family]:
    """What the truth reconciler found at this scrape; every kind is exported, at 0 when clean."""
    family = _g(
        "hami_inconsistency",
        "Disagreements between the scheduler's allocations, HAMi-core's regions and NVML's processes on "
        "this node, by kind (allocation_without_region, region_without_pod, region_unreadable, "
        "memory_outside_hami)",
        ("kind", "node", "zone"),
    )
    for kind in kinds:
        family.add((kind, view.node, ZONE), view.inconsistencies.get(kind, 0))
    return [family]


POD_LABELS_BASE = ("namespace", "pod", "node")


def _pod_labels_family() -> Family:
    return Family("hami_pod_labels", "info", "Allow-listed pod labels, for joins", POD_LABELS_BASE)


def pod_label_families(view: NodeView) -> list[Family]:
    if not view.pod_labels:
        return []
    base = POD_LABELS_BASE
    info = _pod_labels_family()
    for p in view.pod_labels:
        names = (*base, *(k for k, _ in p.labels))
        info.add((p.namespace, p.pod, view.node, *(v for _, v in p.labels)), 1, names)
    return [info]


def describe(legacy: bool, pod_labels: bool) -> list[Family]:
    """Every family a scrape can yield, without samples (``hami_pod_labels`` only with an
    allow-list; its allow-listed label names are added per sample)."""
    empty = NodeView(node="", now=0.0)
    info, linfo = _mig_defs()
    return [
        *host_families(empty, legacy),
        *container_families(empty, legacy),
        *unlimited_families(empty),
        info,
        *([linfo] if legacy else []),
        *([_pod_labels_family()] if pod_labels else []),
        *self_families(empty, Counters({}, {}), ()),
        *inconsistency_families(empty, ()),
    ]
