"""A running pod's device memory by accounting source, for `hami-doctor pod --prometheus-url`.

The vGPU monitor exports each container device's use as HAMi-core reports it and as the driver accounts
it (`hami_vgpu_source_memory_used_bytes{source}`, docs/design/metrics-contract.md); this shows both
numbers side by side, flags a shim that under-reports by more than HAMiVGPUShimUnderReports's threshold,
and, on a node whose cards the driver limits (its register annotation's `memoryEnforcement`), a
container the driver does not actually limit. ``read`` is the I/O, ``findings`` the decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hami.core import annotations as ann
from hami.core.codec import CodecError
from hami.core.codec.node_devices import decode_node_devices
from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.devices import ENFORCE_DRIVER, ENFORCE_HAMI_CORE
from hami.core.promapi import QueryFn
from hami.doctor.findings import BROKEN, OK, WARNING, Finding

MIB = 1 << 20
DRIVER_SOURCES = ("nvml", "dmem")
Key = tuple[str, str, str]  # (container, vdevice index, device uuid)


@dataclass(frozen=True)
class Reading:
    used: int | None = None
    hard_limit: int | None = None  # 0 = none


def enforcement(pod: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]]) -> str:
    """``driver`` when the pod's node registers any of the pod's cards as driver-enforced."""
    meta = pod.get("metadata") or {}
    node = nodes.get(str((pod.get("spec") or {}).get("nodeName", ""))) or {}
    try:
        devices = decode_node_devices(
            ((node.get("metadata") or {}).get("annotations") or {}).get(ann.NODE_REGISTER, "[]")
        )
        allocated = decode_pod_devices(
            str((meta.get("annotations") or {}).get(ann.POD_DEVICES_ALLOCATED, ""))
        )
    except CodecError:
        return ENFORCE_HAMI_CORE  # the node and pod checks report an undecodable annotation
    uuids = {d.uuid for ctr in allocated for d in ctr}
    driver = any(d.enforcement == ENFORCE_DRIVER and d.id in uuids for d in devices)
    return ENFORCE_DRIVER if driver else ENFORCE_HAMI_CORE


def read(query: QueryFn, job: str, namespace: str, pod: str) -> dict[Key, dict[str, Reading]]:
    """(container, vdevice, uuid) -> source -> its reading, from the monitor's last scrape."""
    sel = f'job="{job}",namespace="{namespace}",pod="{pod}"'
    out: dict[Key, dict[str, Reading]] = {}
    for name, field in (("used", "used"), ("limit", "hard_limit")):
        extra = ',limit="hard"' if name == "limit" else ""
        family = f"hami_vgpu_source_memory_{name}_bytes{{{sel}{extra}}}"
        expr = f"max by (container, vdevice_index, device_uuid, source) ({family})"
        for s in query(expr):
            key = (
                s.labels.get("container", ""),
                s.labels.get("vdevice_index", ""),
                s.labels.get("device_uuid", ""),
            )
            by_source = out.setdefault(key, {})
            source = s.labels.get("source", "")
            current = by_source.get(source, Reading())
            by_source[source] = Reading(
                int(s.value) if field == "used" else current.used,
                int(s.value) if field == "hard_limit" else current.hard_limit,
            )
    return out


def _mib(v: int | None) -> str:
    return "-" if v is None else f"{v / MIB:.0f} MiB"


def findings(readings: Mapping[Key, Mapping[str, Reading]], mode: str, threshold: int) -> list[Finding]:
    """One finding per container device: both numbers, and what they say."""
    out: list[Finding] = []
    for (ctr, index, uuid), by_source in sorted(readings.items()):
        where = f"container {ctr} device {index} ({uuid})"
        evidence = tuple(
            f"{source}: used {_mib(r.used)}, hard limit {'none' if r.hard_limit == 0 else _mib(r.hard_limit)}"
            for source, r in sorted(by_source.items())
        )
        core = by_source.get("hami-core")
        driver = [(s, by_source[s]) for s in DRIVER_SOURCES if s in by_source]
        out.append(_verdict(where, core, driver, (mode, threshold), evidence))
    return out


def _verdict(
    where: str,
    core: Reading | None,
    driver: Iterable[tuple[str, Reading]],
    settings: tuple[str, int],  # the node's enforcement, the under-report threshold in bytes
    evidence: tuple[str, ...],
) -> Finding:
    mode, threshold = settings
    driver = list(driver)
    if not driver:
        return Finding(
            WARNING if mode == ENFORCE_DRIVER else OK,
            "accounting.driver.absent",
            f"{where}: the driver's accounting is not available (HAMi-core's numbers only)",
            evidence,
            "hami_monitor_driver_source_available says why the node lacks it (an older driver or kernel, "
            "no cgroup v2 root mounted into the monitor)",
        )
    if mode == ENFORCE_DRIVER and not any(r.hard_limit for _, r in driver):
        return Finding(
            BROKEN,
            "accounting.driver.unlimited",
            f"{where}: the node's cards are enforced by the driver, but the driver holds no memory limit "
            "for this container",
            evidence,
            "the container toolkit's hook did not apply NVIDIA_GPU_MEMORY_LIMIT: check that the toolkit "
            "ships the apply-cuda-memory-limits CDI hook and that the driver supports per-cgroup limits, "
            "then restart the pod",
        )
    used = max((r.used or 0) for _, r in driver)
    if core is not None and core.used is not None and used - core.used > threshold:
        return Finding(
            WARNING,
            "accounting.shim.under-reports",
            f"{where}: HAMi-core reports {_mib(core.used)}, the driver accounts {_mib(used)}: the shim "
            f"under-reports by {_mib(used - core.used)}",
            evidence,
            "allocations that bypass HAMi-core are outside its limit; see the HAMiVGPUShimUnderReports "
            "runbook",
        )
    return Finding(OK, "accounting.agree", f"{where}: the sources agree", evidence)
