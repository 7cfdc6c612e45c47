"""The device-plugin guide's branch "the pod runs but its GPU is not limited", walked per container.

For every container of a running pod that holds HAMi vGPUs, in the guide's order: the libvgpu.so the
device plugin mounts (present and not empty on the node), the ld.so.preload that loads it (mounted
unless CUDA_DISABLE_CONTROL is true, and naming libvgpu.so), the per-container cache directory
Allocate prepares, and the region file HAMi-core creates there on its first CUDA call. Each walk stops
at its first broken step.

Those files live on the pod's node under the device plugin's HOOK_PATH, so the walk reads them where
``--hook-path`` is visible (on the node, or inside the device plugin's pod there); elsewhere it says so
and checks only what the API shows. ``read_node_files`` is the I/O, ``check_container`` the decision.

On a node whose device plugin runs ``--memory-enforcement=driver`` (its cards register
``memoryEnforcement: driver``), the driver holds each container's memory limit and HAMi-core its core
limit only: the walk says so first, and a HAMi-core step that fails no longer means the memory is
unlimited (``hami-doctor pod --prometheus-url`` shows whether the driver limits it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from hami.core import annotations as ann
from hami.core import readable
from hami.core.codec import CodecError
from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.devices import ENFORCE_DRIVER, ENFORCE_HAMI_CORE
from hami.core.hamicore import DISABLE_CONTROL_ENV, HostLayout, control_disabled
from hami.doctor.findings import BROKEN, OK, WARNING, Finding, Section

Obj = dict[str, Any]
LIBRARY = "libvgpu.so"


@dataclass(frozen=True)
class NodeFiles:
    """HAMi-core's files for one container, as found under the hook path."""

    libraries: tuple[tuple[str, int], ...]  # (path, size) of each libvgpu.so* in the vgpu dir
    preload: str | None  # ld.so.preload's text; None when the file is missing
    cache_dir: str
    cache_dir_present: bool
    regions: tuple[str, ...]  # *.cache files in the container's cache dir


def read_node_files(layout: HostLayout, pod_uid: str, container: str) -> NodeFiles | None:
    """The files of one container; None when the hook path is not visible from here."""
    if not os.path.isdir(layout.vgpu_dir):
        return None
    with os.scandir(layout.vgpu_dir) as it:
        libraries = tuple(
            sorted((e.path, e.stat().st_size) for e in it if e.name.startswith(LIBRARY) and e.is_file())
        )
    try:
        with open(layout.preload_path, encoding="utf-8", errors="replace") as f:
            preload: str | None = f.read(65536)
    except OSError:
        preload = None
    cache_dir = layout.cache_dir(pod_uid, container)
    try:
        with os.scandir(cache_dir) as it:
            regions = tuple(sorted(e.name for e in it if e.name.endswith(".cache") and e.is_file()))
        present = True
    except OSError:
        regions, present = (), False
    return NodeFiles(libraries, preload, cache_dir, present, regions)


def vgpu_containers(pod: Obj) -> list[Obj]:
    """The regular containers the scheduler gave HAMi devices (init containers come first in the
    annotation and are done before the pod runs)."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(ann.POD_DEVICES_ALLOCATED, "")
    if not text:
        return []
    try:
        per_container = decode_pod_devices(str(text))
    except CodecError:
        return []  # the pod tree reports an undecodable annotation
    spec = pod.get("spec") or {}
    offset = len(spec.get("initContainers") or [])
    containers = spec.get("containers") or []
    return [
        c for j, c in enumerate(containers) if offset + j < len(per_container) and per_container[offset + j]
    ]


def check_container(container: Obj, files: NodeFiles | None, layout: HostLayout, node: str) -> list[Finding]:
    """One container's walk, stopping at the first broken step."""
    name = str(container.get("name", ""))
    out: list[Finding] = []
    if control_disabled(container):
        return [
            Finding(
                WARNING,
                "gpulimit.control-disabled",
                f"container {name} sets {DISABLE_CONTROL_ENV}=true: no ld.so.preload is mounted, so "
                "HAMi-core does not limit its memory or cores",
                (f"env {DISABLE_CONTROL_ENV}=true",),
                f"remove {DISABLE_CONTROL_ENV} if the container should be limited, or give it whole GPUs",
            )
        ]
    if files is None:
        return [
            Finding(
                WARNING,
                "gpulimit.node-files.unseen",
                f"container {name}: HAMi-core's files of node {node} are not visible here "
                f"({layout.vgpu_dir} is missing)",
                (),
                f"run this check on node {node}, for example in its device plugin pod: kubectl exec -n "
                "<namespace> <device plugin pod> -- hami-doctor pod <namespace>/<pod> --hook-path "
                f"{layout.hook_path}",
            )
        ]
    libraries = [f"{path} ({readable.number(size)} bytes)" for path, size in files.libraries]
    if not any(size > 0 for _, size in files.libraries):
        return [
            Finding(
                BROKEN,
                "gpulimit.library.missing",
                f"container {name}: no usable {LIBRARY} in {layout.vgpu_dir}; Allocate mounts it into every "
                "vGPU container",
                tuple(libraries) or (f"no {LIBRARY}* file",),
                f"check that the device plugin's postStart copied HAMi-core into {layout.vgpu_dir} (its "
                "log, ls on the node), then restart the pod",
            )
        ]
    out.append(Finding(OK, "gpulimit.library.present", f"{LIBRARY} is on the node", tuple(libraries)))
    if files.preload is None or LIBRARY not in files.preload:
        what = "is missing" if files.preload is None else f"does not name {LIBRARY}"
        return [
            *out,
            Finding(
                BROKEN,
                "gpulimit.preload.missing",
                f"container {name}: {layout.preload_path} {what}; it is mounted as the container's "
                "/etc/ld.so.preload and is what loads HAMi-core",
                (f"{layout.preload_path}: {files.preload!r}" if files.preload is not None else "no file",),
                f"restore {layout.preload_path} with the path of {LIBRARY} in the container "
                f"({layout.vgpu_dir}/{LIBRARY}); the device plugin's postStart writes it; then restart "
                "the pod",
            ),
        ]
    out.append(
        Finding(OK, "gpulimit.preload.present", "ld.so.preload loads libvgpu.so", (files.preload.strip(),))
    )
    if not files.cache_dir_present:
        return [
            *out,
            Finding(
                BROKEN,
                "gpulimit.cache-dir.missing",
                f"container {name}: Allocate never prepared its cache directory; HAMi-core has nowhere to "
                "create its region",
                (f"no directory {files.cache_dir}",),
                "check the device plugin's Allocate for this pod (at -v=4 it logs 'Allocate for pod "
                f"<namespace>/<pod>') and that its HOOK_PATH is {layout.hook_path}",
            ),
        ]
    if not files.regions:
        return [
            *out,
            Finding(
                WARNING,
                "gpulimit.region.missing",
                f"container {name}: no HAMi-core region yet: the container has not initialised CUDA, or "
                f"{LIBRARY} failed to load",
                (f"{files.cache_dir} holds no .cache file",),
                "if the container already runs GPU work, its CUDA and this HAMi-core build do not match: "
                "set LIBCUDA_LOG_LEVEL=4 in the container and read its output",
            ),
        ]
    out.append(
        Finding(
            OK,
            "gpulimit.region.present",
            f"container {name}: HAMi-core's region is there, so its limits apply",
            files.regions,
            "if the monitor shows no metrics for it, look at hami_monitor_region_skips_total by reason",
        )
    )
    return out


def driver_finding(container: Obj) -> Finding:
    name = str(container.get("name", ""))
    return Finding(
        OK,
        "gpulimit.memory.driver",
        f"container {name}: its node's cards are enforced by the driver: Allocate gives it "
        "NVIDIA_GPU_MEMORY_LIMIT for the container toolkit's hook, and HAMi-core limits its cores only",
        ("node register annotation: memoryEnforcement=driver",),
        "hami-doctor pod <namespace>/<pod> --prometheus-url <url> shows whether the driver holds the limit",
    )


def diagnose(pod: Obj, layout: HostLayout, enforcement: str = ENFORCE_HAMI_CORE) -> Section | None:
    """The walk for every vGPU container of a running pod; None when there is nothing to walk."""
    if (pod.get("status") or {}).get("phase") != "Running":
        return None
    containers = vgpu_containers(pod)
    if not containers:
        return None
    meta = pod.get("metadata") or {}
    node = str((pod.get("spec") or {}).get("nodeName", ""))
    section = Section(f"pod {meta.get('namespace', '')}/{meta.get('name', '')}: GPU limits")
    for container in containers:
        files = read_node_files(layout, str(meta.get("uid", "")), str(container.get("name", "")))
        walk = check_container(container, files, layout, node)
        if enforcement == ENFORCE_DRIVER:
            # HAMi-core's steps now decide the core limit alone: a broken one is a warning
            softened = (replace(f, severity=WARNING) if f.severity == BROKEN else f for f in walk)
            walk = [driver_finding(container), *softened]
        section.findings += walk
    return section
