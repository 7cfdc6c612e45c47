"""Joining regions to pods (§B.3) and zero series for allocated-but-idle containers (HAMi #281).

Pods are the API's JSON dicts from the node-scoped informer. A region belongs to the container
whose pod UID and name match its dir; a container holding devices in ``hami.io/vgpu-devices-allocated``
but without a region yet (no CUDA call so far) gets 0-valued usage with its allocated limits. A
container whose region exists but cannot be read gets no series at all: zeros would claim an idle
container that may be using its whole card (the skip metrics report it instead).

Section signs (§) refer to docs/design/node-agent-monitor.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami.core.annotations import POD_DEVICES_ALLOCATED, POD_MIG_ALLOCATIONS
from hami.core.devices import MigAllocation, PodDevices
from hami.core.hamicore import control_disabled
from hami.core.objects import annotations_of, labels_of, name_of, namespace_of, uid_of
from hami.exporter.cgroups import container_id
from hami.exporter.region.layout import UUID_EXPORT_LEN
from hami.exporter.region.parse import DeviceUsage, RegionSnapshot

MIB = 1 << 20
_FINISHED = frozenset({"Succeeded", "Failed"})
_LABEL_NAME = re.compile(r"[^a-zA-Z0-9_]")


@dataclass(frozen=True)
class ContainerView:
    namespace: str
    pod: str
    container: str
    devices: tuple[DeviceUsage, ...]
    processes: int
    last_kernel_time: int  # 0 = never / unknown
    started: bool  # False: values come from the allocation annotation, usage is 0


@dataclass(frozen=True)
class MigView:
    """The runtime MIG identity of one container device (``hami_mig_device_info``, §B.4)."""

    namespace: str
    pod: str
    container: str
    vdevice_index: int
    device_uuid: str  # the parent GPU
    mig_uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int


@dataclass(frozen=True)
class UnlimitedView:
    """GPU processes of a HAMi container that HAMi-core does not limit, and why (``reason``)."""

    namespace: str
    pod: str
    container: str
    reason: str
    processes: int


# Why a container's GPU processes run without HAMi-core (the bounded reason label).
CONTROL_DISABLED = "control_disabled"  # CUDA_DISABLE_CONTROL=true: no ld.so.preload by request
NO_CACHE_DIR = "no_cache_dir"  # Allocate never prepared <uid>_<container> under the monitor's HOOK_PATH
NO_REGION = "no_region"  # the dir is there but HAMi-core never created its region: it is not loaded
UNLIMITED_REASONS = (CONTROL_DISABLED, NO_CACHE_DIR, NO_REGION)


@dataclass(frozen=True)
class PodLabels:
    namespace: str
    pod: str
    labels: tuple[tuple[str, str], ...]  # (prometheus label name, value), sorted


def container_names(pod: Mapping[str, Any], key: str) -> list[str]:
    spec = pod.get("spec") or {}
    return [str(c.get("name", "")) for c in spec.get(key) or [] if isinstance(c, Mapping)]


def allocated_devices(
    pod: Mapping[str, Any], decode: Callable[[str], PodDevices]
) -> dict[str, tuple[DeviceUsage, ...]]:
    """Zero-usage devices per regular container from the allocation annotation (may raise)."""
    text = annotations_of(pod).get(POD_DEVICES_ALLOCATED)
    if not text:
        return {}
    per_container = decode(text)
    offset = len(container_names(pod, "initContainers"))  # the annotation lists init containers first
    out: dict[str, tuple[DeviceUsage, ...]] = {}
    for j, name in enumerate(container_names(pod, "containers")):
        if offset + j >= len(per_container) or not per_container[offset + j]:
            continue
        out[name] = tuple(
            DeviceUsage(
                index=i,
                uuid=dev.uuid[:UUID_EXPORT_LEN],
                limit_bytes=dev.usedmem * MIB,
                sm_limit_percent=dev.usedcores if 0 < dev.usedcores <= 100 else 100,
                used_bytes=0,
                context_bytes=0,
                module_bytes=0,
                buffer_bytes=0,
                offset_bytes=0,
                sm_util_percent=0,
            )
            for i, dev in enumerate(per_container[offset + j])
        )
    return out


@dataclass(frozen=True)
class Planned:
    """A container that gets series: from its region when there is one, else from ``allocated``."""

    key: tuple[str, str]  # (pod UID, container), as the regions are keyed
    namespace: str
    pod: str
    container: str
    allocated: tuple[DeviceUsage, ...] | None  # zero-usage devices; None: it has a region


def plan(
    pods: Iterable[Mapping[str, Any]],
    regions: Collection[tuple[str, str]],
    decode: Callable[[str], PodDevices],
    on_decode_error: Callable[[Mapping[str, Any], Exception], None] = lambda pod, err: None,
    unreadable: Collection[tuple[str, str]] = frozenset(),
) -> list[Planned]:
    """One entry per (pod, regular container) that has a region (a key in ``regions``) or an
    allocation, unless its region is in ``unreadable`` (present but skipped). It depends on the
    pods and on which regions exist, not on what they hold: kept while neither changes."""
    out: list[Planned] = []
    for pod in pods:
        uid, ns, name = uid_of(pod), namespace_of(pod), name_of(pod)
        names = container_names(pod, "containers")
        # the annotation is decoded only for a pod with a container that has no region yet
        idle = any((uid, ctr) not in regions and (uid, ctr) not in unreadable for ctr in names)
        finished = (pod.get("status") or {}).get("phase") in _FINISHED
        try:
            allocated = allocated_devices(pod, decode) if idle and not finished else {}
        except ValueError as err:
            on_decode_error(pod, err)
            allocated = {}
        for ctr in names:
            key = (uid, ctr)
            if key in regions:
                out.append(Planned(key, ns, name, ctr, None))
            elif ctr in allocated and key not in unreadable:
                out.append(Planned(key, ns, name, ctr, allocated[ctr]))
    return out


def view_of(p: Planned, snap: RegionSnapshot | None) -> ContainerView:
    """The container's view: from ``snap``, its region's snapshot, when it has a region."""
    if snap is not None:
        return ContainerView(p.namespace, p.pod, p.container, snap.devices, snap.processes,
                             snap.last_kernel_time, True)
    return ContainerView(p.namespace, p.pod, p.container, p.allocated or (), 0, 0, False)


def mig_devices(
    pods: Iterable[Mapping[str, Any]],
    decode: Callable[[str], list[MigAllocation]],
    on_error: Callable[[Mapping[str, Any], str], None] = lambda pod, detail: None,
) -> list[MigView]:
    """Entries of ``hami.io/vgpu-mig-allocations`` that carry a runtime identity.

    ``containerIndex`` counts init containers first (as the annotation does); an index past the
    pod's containers, or an annotation that does not decode, is reported and skipped.
    """
    out: list[MigView] = []
    for pod in pods:
        text = annotations_of(pod).get(POD_MIG_ALLOCATIONS)
        if not text or (pod.get("status") or {}).get("phase") in _FINISHED:
            continue
        try:
            allocations = decode(text)
        except ValueError as err:
            on_error(pod, f"failed to decode {POD_MIG_ALLOCATIONS}: {err}")
            continue
        names = container_names(pod, "initContainers") + container_names(pod, "containers")
        for a in allocations:
            if not a.mig_uuid or a.gpu_instance_id is None or a.compute_instance_id is None:
                continue  # placed by the scheduler, not yet created by the device plugin
            if a.container_index >= len(names):
                on_error(pod, f"MIG allocation containerIndex {a.container_index} out of range")
                continue
            out.append(
                MigView(
                    namespace_of(pod),
                    name_of(pod),
                    names[a.container_index],
                    a.device_index,
                    a.gpu_uuid,
                    a.mig_uuid,
                    a.profile,
                    a.gpu_instance_id,
                    a.compute_instance_id,
                )
            )
    return out


def unlimited_containers(
    pods: Iterable[Mapping[str, Any]],
    owners: Iterable[tuple[str, str]],
    has_region_file: Mapping[tuple[str, str], bool],
    decode: Callable[[str], PodDevices],
) -> list[UnlimitedView]:
    """Containers given HAMi vGPUs whose GPU processes run outside HAMi-core.

    ``owners`` holds the (pod UID, container ID) of each GPU process NVML lists; ``has_region_file``
    maps the (pod UID, container) of every dir under the monitor's containers path to whether it
    holds a region file. A container counts when it has processes, devices in
    ``hami.io/vgpu-devices-allocated`` and no region file (HAMi-core creates it when it loads).
    MIG allocations have no HAMi-core by design and are left out.
    """
    per_container: dict[tuple[str, str], int] = {}
    for owner in owners:
        per_container[owner] = per_container.get(owner, 0) + 1
    if not per_container:
        return []
    out: list[UnlimitedView] = []
    for pod in pods:
        uid = uid_of(pod)
        if POD_MIG_ALLOCATIONS in annotations_of(pod) or (pod.get("status") or {}).get("phase") in _FINISHED:
            continue
        ids = {
            str(s.get("name", "")): container_id(str(s.get("containerID", "")))
            for s in (pod.get("status") or {}).get("containerStatuses") or []
            if isinstance(s, Mapping)
        }
        running = {name: per_container.get((uid, cid), 0) for name, cid in ids.items() if cid}
        if not any(running.values()):
            continue
        try:
            allocated = allocated_devices(pod, decode)
        except ValueError:
            continue  # the collector reports an undecodable annotation already
        containers = (pod.get("spec") or {}).get("containers") or []
        specs = {str(c.get("name", "")): c for c in containers if isinstance(c, Mapping)}
        for name, count in sorted(running.items()):
            if not count or name not in allocated:
                continue
            region = has_region_file.get((uid, name))
            if region:
                continue
            if control_disabled(specs.get(name, {})):
                reason = CONTROL_DISABLED
            else:
                reason = NO_CACHE_DIR if region is None else NO_REGION
            out.append(UnlimitedView(namespace_of(pod), name_of(pod), name, reason, count))
    return out


def label_name(key: str) -> str:
    """A Kubernetes label key as a Prometheus label name, kube-state-metrics style."""
    return "label_" + _LABEL_NAME.sub("_", key)


def pod_labels(pods: Iterable[Mapping[str, Any]], allowlist: Sequence[str]) -> list[PodLabels]:
    """The allow-listed labels of each pod (``*`` allows all), for ``hami_pod_labels_info``."""
    if not allowlist:
        return []
    allow_all = "*" in allowlist
    out = []
    for pod in pods:
        chosen = {label_name(k): v for k, v in labels_of(pod).items() if allow_all or k in allowlist}
        out.append(PodLabels(namespace_of(pod), name_of(pod), tuple(sorted(chosen.items()))))
    return out
