"""Joining regions to pods (spec §B.3) and zero series for allocated-but-idle containers (HAMi #281).

Pods are the API's JSON dicts from the node-scoped informer. A region belongs to the container
whose pod UID and name match its dir; a container holding devices in ``hami.io/vgpu-devices-allocated``
but without a region yet (no CUDA call so far) gets 0-valued usage with its allocated limits. A
container whose region exists but cannot be read gets no series at all: zeros would claim an idle
container that may be using its whole card (the skip metrics report it instead).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami.core.annotations import POD_DEVICES_ALLOCATED, POD_MIG_ALLOCATIONS
from hami.core.devices import MigAllocation, PodDevices
from hami.core.objects import annotations_of, labels_of, name_of, namespace_of, uid_of
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
    """The runtime MIG identity of one container device (``hami_mig_device_info``, spec §B.4)."""

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
class PodLabels:
    namespace: str
    pod: str
    labels: tuple[tuple[str, str], ...]  # (prometheus label name, value), sorted


def _names(pod: Mapping[str, Any], key: str) -> list[str]:
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
    offset = len(_names(pod, "initContainers"))  # the annotation lists init containers first
    out: dict[str, tuple[DeviceUsage, ...]] = {}
    for j, name in enumerate(_names(pod, "containers")):
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


def attribute(
    pods: Iterable[Mapping[str, Any]],
    regions: Mapping[tuple[str, str], RegionSnapshot],
    decode: Callable[[str], PodDevices],
    on_decode_error: Callable[[Mapping[str, Any], Exception], None] = lambda pod, err: None,
    unreadable: Collection[tuple[str, str]] = frozenset(),
) -> list[ContainerView]:
    """One view per (pod, regular container) that has a region or an allocation, unless its region
    is in ``unreadable`` (present but skipped)."""
    views: list[ContainerView] = []
    for pod in pods:
        uid, ns, name = uid_of(pod), namespace_of(pod), name_of(pod)
        names = _names(pod, "containers")
        # the annotation is decoded only for a pod with a container that has no region yet
        idle = any((uid, ctr) not in regions and (uid, ctr) not in unreadable for ctr in names)
        finished = (pod.get("status") or {}).get("phase") in _FINISHED
        try:
            allocated = allocated_devices(pod, decode) if idle and not finished else {}
        except ValueError as err:
            on_decode_error(pod, err)
            allocated = {}
        for ctr in names:
            snap = regions.get((uid, ctr))
            if snap is not None:
                views.append(
                    ContainerView(ns, name, ctr, snap.devices, snap.processes, snap.last_kernel_time, True)
                )
            elif ctr in allocated and (uid, ctr) not in unreadable:
                views.append(ContainerView(ns, name, ctr, allocated[ctr], 0, 0, False))
    return views


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
        names = _names(pod, "initContainers") + _names(pod, "containers")
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
