"""The truth reconciler: the scheduler's allocations, HAMi-core's regions and NVML's processes, crossed.

Per node, at every scrape (the findings are pure: data in, findings out; ``Settled`` keeps what persists):

* ``allocation_without_region``: a running pod's container has a device allocation but no region. Normal
  for a few seconds after start (the region appears with the first CUDA call); the alert waits for it.
* ``region_without_pod``: a readable region whose pod is not on this node (deleted, or never scheduled
  by HAMi): its memory is invisible to the scheduler.
* ``region_unreadable``: a pod with an allocation has a region the monitor cannot read (bad layout or
  version, unreadable file): its use is not measured.
* ``memory_outside_hami``: a GPU whose processes hold more memory (NVML) than HAMi-core accounts for on
  it, by more than ``OUTSIDE_TOLERANCE_BYTES``: something runs on the card without HAMi's limits. The
  driver's accounting of a container that HAMi-core does not run in (driver enforcement) counts as
  HAMi's.

And per container device, where the driver accounts it too (``accounting_gaps``): the driver's use
minus HAMi-core's self-reported use, positive when the shim under-reports (allocations that bypass it,
contexts it estimates low). The alert on it is HAMiVGPUShimUnderReports.


A node's normal churn passes through each of these for a moment: a container allocated but not started
(no CUDA call yet), a pod deleted while its region awaits the monitor's GC (one resync interval), the
NVML and region reads of one scrape straddling an allocation. ``Settled`` keeps a finding only once it
held for ``GRACE_OBSERVATIONS`` consecutive observations (scrapes, not seconds: a node scraped twice as
often settles twice as fast), and a region without a pod only once something kept writing it: a region
that stays as its pod left it is garbage the GC removes, and a process that still holds the card after
that shows as ``memory_outside_hami``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hami.core.devices import PodDevices
from hami.core.objects import name_of, namespace_of, uid_of
from hami.exporter.attribution import ContainerView, allocated_devices, container_names
from hami.exporter.region.parse import RegionSnapshot
from hami.exporter.view import DriverUsage, HostDevice

KINDS = ("allocation_without_region", "region_without_pod", "region_unreadable", "memory_outside_hami")
# NVML counts a process's CUDA context and the driver's own reservations that HAMi-core's region may not
# (its context estimate is per device, taken once); below this the two are the same.
OUTSIDE_TOLERANCE_BYTES = 256 << 20
_FINISHED = ("Succeeded", "Failed")

ContainerKey = tuple[str, str]  # (pod uid, container name), as the regions are keyed


@dataclass(frozen=True)
class Inconsistency:
    kind: str
    subject: str  # namespace/pod/container, a region directory's key, or a GPU uuid
    detail: str


def reconcile(
    pods: Iterable[Mapping[str, Any]],
    regions: Mapping[ContainerKey, RegionSnapshot],
    unreadable: Collection[ContainerKey],
    *,
    decode: Callable[[str], PodDevices],
    hosts: Iterable[HostDevice],
) -> list[Inconsistency]:
    return [*pod_findings(pods, regions, unreadable, decode=decode), *memory_findings(regions, hosts)]


def pod_findings(
    pods: Iterable[Mapping[str, Any]],
    regions: Collection[ContainerKey],
    unreadable: Collection[ContainerKey],
    *,
    decode: Callable[[str], PodDevices],
) -> list[Inconsistency]:
    """The findings that depend on the pods and on which regions exist (``regions``: their keys),
    not on what they hold."""
    out: list[Inconsistency] = []
    on_node: set[str] = set()
    for pod in pods:
        uid = uid_of(pod)
        on_node.add(uid)
        if (pod.get("status") or {}).get("phase") in _FINISHED:
            continue
        # As in attribution: the annotation is decoded only for a pod with a container lacking a region.
        if all((uid, ctr) in regions for ctr in container_names(pod, "containers")):
            continue
        try:
            allocated = allocated_devices(pod, decode)
        except ValueError:
            continue  # the collector reports the annotation; it names no container to check
        where = f"{namespace_of(pod)}/{name_of(pod)}"
        for ctr in sorted(allocated):
            key = (uid, ctr)
            if key in unreadable:
                out.append(Inconsistency("region_unreadable", f"{where}/{ctr}", "its region cannot be read"))
            elif key not in regions:
                out.append(
                    Inconsistency("allocation_without_region", f"{where}/{ctr}", "allocated, no region")
                )
    for uid, ctr in sorted(regions):
        if uid not in on_node:
            out.append(
                Inconsistency("region_without_pod", f"{uid}_{ctr}", "no pod with this uid on the node")
            )
    return out


def memory_findings(
    regions: Mapping[ContainerKey, RegionSnapshot],
    hosts: Iterable[HostDevice],
    driver_accounted: Mapping[str, int] | None = None,
) -> list[Inconsistency]:
    """GPUs whose processes hold more memory than HAMi-core's regions (and ``driver_accounted``:
    device uuid -> bytes the driver accounts to containers it limits without HAMi-core) account for."""
    out: list[Inconsistency] = []
    # Every readable region counts as HAMi's, with or without a pod (pod_findings reports that one).
    accounted: dict[str, int] = dict(driver_accounted or {})
    for snap in regions.values():
        for d in snap.devices:
            accounted[d.uuid] = accounted.get(d.uuid, 0) + d.used_bytes
    for h in hosts:
        if h.process_memory is None:
            continue
        # Regions carry the uuid as HAMi exports it (possibly truncated): match on that prefix.
        hami = sum(v for u, v in accounted.items() if h.uuid.startswith(u))
        outside = h.process_memory - hami
        if outside > OUTSIDE_TOLERANCE_BYTES:
            out.append(
                Inconsistency(
                    "memory_outside_hami",
                    h.uuid,
                    f"processes hold {h.process_memory >> 20} MiB, HAMi-core accounts for {hami >> 20} MiB",
                )
            )
    return out


def accounting_gaps(
    containers: Iterable[ContainerView], usage: Iterable[DriverUsage]
) -> list[tuple[DriverUsage, int]]:
    """Each driver reading of a container that HAMi-core runs in (it has a region), with the driver's
    use minus HAMi-core's for the same device: > 0 when the shim under-reports. A device over its limit
    is left out: its use is exported clamped to the limit, not as the shim reports it (and
    HAMiVGPUMemoryOverLimit speaks for it)."""
    core = {
        (c.namespace, c.pod, c.container, d.index): d.used_bytes
        for c in containers
        if c.started
        for d in c.devices
        if not d.over_limit
    }
    out = []
    for u in usage:
        used = core.get((u.namespace, u.pod, u.container, u.vdevice_index))
        if used is not None:
            out.append((u, u.used - used))
    return out


def driver_limited(finding: Inconsistency, limited: Collection[tuple[str, str, str]]) -> bool:
    """An ``allocation_without_region`` of a container the driver limits (its limits need no region)."""
    where = tuple(finding.subject.split("/", 2))
    return finding.kind == "allocation_without_region" and len(where) == 3 and where in limited


def driver_only(containers: Iterable[ContainerView], usage: Iterable[DriverUsage]) -> dict[str, int]:
    """Bytes per device uuid that the driver accounts to containers without a region (driver
    enforcement), one source per container device (nvml before dmem: they count the same memory)."""
    started = {(c.namespace, c.pod, c.container) for c in containers if c.started}
    seen: dict[tuple[str, str, str, int], DriverUsage] = {}
    for u in usage:
        key = (u.namespace, u.pod, u.container, u.vdevice_index)
        if (u.namespace, u.pod, u.container) not in started and (key not in seen or u.source == "nvml"):
            seen[key] = u
    out: dict[str, int] = {}
    for u in seen.values():
        out[u.device_uuid] = out.get(u.device_uuid, 0) + u.used
    return out


GRACE_OBSERVATIONS = 3


def _fingerprint(region: RegionSnapshot | None) -> tuple[object, ...]:
    """What a live process changes in its region: memory, SM use, processes, kernel launches."""
    if region is None:
        return ()
    use = tuple((d.uuid, d.used_bytes, d.sm_util_sum) for d in region.devices)
    return (use, region.processes, region.recent_kernel, region.last_kernel_time)


class Settled:
    """The findings that persisted: ``observe`` takes each observation's findings, in order, and
    returns those seen in ``grace`` consecutive observations (a region without a pod, once it changed
    at ``grace`` of the observations since its pod left). Thread-safe: concurrent scrapes are
    observations in some order."""

    def __init__(self, grace: int = GRACE_OBSERVATIONS) -> None:
        self._grace = grace
        self._lock = threading.Lock()
        self._streak: dict[tuple[str, str], int] = {}
        self._podless: dict[str, tuple[tuple[object, ...], int]] = {}  # subject -> (last seen, changes)

    def observe(
        self, found: Iterable[Inconsistency], regions: Mapping[ContainerKey, RegionSnapshot]
    ) -> list[Inconsistency]:
        out: list[Inconsistency] = []
        with self._lock:
            streak: dict[tuple[str, str], int] = {}
            podless: dict[str, tuple[tuple[object, ...], int]] = {}
            for f in found:
                key = (f.kind, f.subject)
                n = streak[key] = self._streak.get(key, 0) + 1
                if f.kind == "region_without_pod":
                    # Counted once written at ``grace`` observations since its pod left: a straggling
                    # write or two (the node's kubelet learns of the deletion after the API) is churn.
                    uid, _, ctr = f.subject.partition("_")
                    now = _fingerprint(regions.get((uid, ctr)))
                    last, changes = self._podless.get(f.subject, (now, 0))
                    podless[f.subject] = (now, changes + (now != last))
                    n = podless[f.subject][1]
                if n >= self._grace:
                    out.append(f)
            self._streak, self._podless = streak, podless
        return out


def counts(found: Iterable[Inconsistency]) -> dict[str, int]:
    """Findings per kind, every kind present (0 when none)."""
    n = dict.fromkeys(KINDS, 0)
    for f in found:
        n[f.kind] += 1
    return n
