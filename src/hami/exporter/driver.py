"""The driver as a second source of truth: each container's device memory as the driver accounts it.

Two ways, each where the node has it (§B.6):

* ``nvml``: ``nvmlDeviceGetMemoryLimits_v1`` on the container's cgroup path, per GPU: soft limit, hard
  limit (``MEMORY_LIMIT_MAX`` = none) and the memory in use;
* ``dmem``: the cgroup v2 ``dmem`` controller's ``dmem.min`` (soft), ``dmem.max`` (hard) and
  ``dmem.current`` of the region whose PCI bus id is the GPU's.

A container is found from its pod and container (``hami.exporter.cgroupfs``), its devices from the
container's view (its region, or its allocation when it has none). Limits are exported with HAMi's
convention, 0 = no limit. A source the node lacks (no NVML, a driver or a kernel before it) is
reported once with its reason and stays out of the way; a refused cgroup is counted by reason, as
regions are, and hides no other container.

Section signs (§) refer to docs/design/node-agent-monitor.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from hami.core import klog
from hami.core.nvml import MEMORY_LIMIT_MAX, Nvml, NvmlError
from hami.core.objects import name_of, namespace_of, uid_of
from hami.exporter import cgroupfs
from hami.exporter.attribution import ContainerView
from hami.exporter.cgroups import container_id
from hami.exporter.dmem import DmemFile, bus_id, region_bus_id
from hami.exporter.region import reasons
from hami.exporter.view import CtrKey, DriverUsage, DriverView, HostDevice

log = klog.get_logger(__name__)
NVML = "nvml"
DMEM = "dmem"
SOURCES = (NVML, DMEM)
AVAILABLE = "available"
# Why the nvml source is absent (the dmem ones are cgroupfs's).
NO_NVML = "no_nvml"  # NVML did not initialise
DRIVER_TOO_OLD = "driver_too_old"  # FUNCTION_NOT_FOUND: a driver before nvmlDeviceGetMemoryLimits_v1
NOT_SUPPORTED = "not_supported"  # every GPU answers NOT_SUPPORTED (MIG handles, unsupported products)
NO_GPU = "no_gpu"  # no GPU to ask yet (asked again at the next scrape)
GET_LIMITS = "nvmlDeviceGetMemoryLimits_v1"


def container_keys(pods: Iterable[Mapping[str, Any]]) -> dict[CtrKey, cgroupfs.Key]:
    """Each pod container the runtime has named: (namespace, pod, container) -> (pod UID, container ID),
    as its cgroup path names it (``hami.exporter.cgroups``)."""
    out: dict[CtrKey, cgroupfs.Key] = {}
    for pod in pods:
        uid = uid_of(pod)
        for s in (pod.get("status") or {}).get("containerStatuses") or []:
            if isinstance(s, Mapping) and (cid := container_id(str(s.get("containerID", "")))):
                out[(namespace_of(pod), name_of(pod), str(s.get("name", "")))] = (uid, cid)
    return out


def limit(value: int | None, none: int | None) -> int:
    """A limit in HAMi's convention: 0 when there is none (``none`` is the source's encoding of it)."""
    return 0 if value is None or value == none else value


def dmem_usage(
    c: ContainerView, dmem: Mapping[str, DmemFile], hosts: Sequence[HostDevice]
) -> tuple[list[DriverUsage], bool]:
    """The container's devices as its dmem files account them, and whether a GPU of known bus id had no
    region there (no row for it: the region naming ``drm/<bus>/vram0`` is assumed, not verified)."""
    current = dmem["current"].values
    by_bus = {b: r for r in current if (b := region_bus_id(r)) is not None}
    out = []
    unmatched = False
    for d in c.devices:
        host = _host(hosts, d.uuid)
        if host is None or not host.pci_bus_id:
            continue
        region = by_bus.get(bus_id(host.pci_bus_id))
        if region is None:
            unmatched = True
            continue
        out.append(
            DriverUsage(
                c.namespace,
                c.pod,
                c.container,
                d.index,
                d.uuid,
                DMEM,
                limit(dmem["min"].values.get(region), 0),
                limit(dmem["max"].values.get(region), None),
                current[region] or 0,
            )
        )
    return out, unmatched


def _host(hosts: Sequence[HostDevice], uuid: str) -> HostDevice | None:
    # Regions carry the uuid as HAMi exports it (possibly truncated): match on that prefix.
    return next((h for h in hosts if uuid and h.uuid.startswith(uuid)), None)


class DriverReader:
    """Reads both sources at each scrape; ``nvml`` is None when NVML did not initialise."""

    def __init__(
        self,
        nvml: Nvml | None,
        cgroup_root: str,
        on_nvml_error: Callable[[list[str]], None],
        index: cgroupfs.CgroupIndex | None = None,
    ) -> None:
        self._nvml = nvml
        self._root = cgroup_root
        self._index = index or cgroupfs.CgroupIndex(cgroup_root, on_error=self._scan_error)
        self._on_nvml_error = on_nvml_error
        self._nvml_state: str | None = None  # known once a GPU answered the probe
        self._reported: dict[str, str] = {}

    def read(
        self,
        pods: Sequence[Mapping[str, Any]],
        containers: Sequence[ContainerView],
        hosts: Sequence[HostDevice],
    ) -> DriverView:
        dmem_reason = cgroupfs.dmem_absent(self._root)
        nvml_state = self._nvml_state or self._probe(hosts)
        if nvml_state != NO_GPU:
            self._nvml_state = nvml_state  # the driver does not change under a running monitor
        sources = {NVML: nvml_state, DMEM: dmem_reason or AVAILABLE}
        usage: list[DriverUsage] = []
        refused: dict[str, frozenset[str]] = {}
        if nvml_state == AVAILABLE or dmem_reason is None:
            keys = container_keys(pods)
            names = ((v.namespace, v.pod, v.container) for v in containers)
            wanted = {k: keys[k] for k in names if k in keys}
            found, refused = self._index.lookup(set(wanted.values()))
            errors: list[str] = []
            for c in containers:
                cg = found.get(wanted.get((c.namespace, c.pod, c.container), ("", "")))
                if cg is None:
                    continue
                if nvml_state == AVAILABLE:
                    usage += self._nvml_usage(c, cg, hosts, refused, errors)
                if dmem_reason is None:
                    dmem, reason = self._index.read_dmem(cg)
                    met = {reason} if reason is not None else set()
                    if dmem is not None:
                        rows, unmatched = dmem_usage(c, dmem, hosts)
                        usage += rows
                        met |= {reasons.DMEM_NO_REGION} if unmatched else set()
                    if met:
                        refused[cg.rel] = refused.get(cg.rel, frozenset()) | met
            if errors:
                self._on_nvml_error(errors)
        self._report(sources)
        skipped: dict[str, int] = {}
        for why in refused.values():
            for r in why:
                skipped[r] = skipped.get(r, 0) + 1
        return DriverView(tuple(usage), sources, skipped, refused)

    def close(self) -> None:
        self._index.close()

    def _probe(self, hosts: Sequence[HostDevice]) -> str:
        """Whether the driver has the call: any answer but FUNCTION_NOT_FOUND or NOT_SUPPORTED says so
        (the root cgroup need not be one it accounts to)."""
        if self._nvml is None:
            return NO_NVML
        unsupported = False
        for h in hosts:
            try:
                self._nvml.device(h.index).memory_limits(self._root)
            except NvmlError as err:
                if err.code == "FUNCTION_NOT_FOUND":
                    return DRIVER_TOO_OLD
                if err.code == "NOT_SUPPORTED":
                    unsupported = True
                    continue
            return AVAILABLE
        return NOT_SUPPORTED if unsupported else NO_GPU

    def _nvml_usage(
        self,
        c: ContainerView,
        cg: cgroupfs.ContainerCgroup,
        hosts: Sequence[HostDevice],
        refused: dict[str, frozenset[str]],
        errors: list[str],
    ) -> list[DriverUsage]:
        assert self._nvml is not None
        out = []
        for d in c.devices:
            host = _host(hosts, d.uuid)
            if host is None or host.migs:  # MIG handles are not supported
                continue
            try:
                got = self._nvml.device(host.index).memory_limits(cg.path)
            except NvmlError as err:
                if err.code == "NOT_FOUND":  # the cgroup went away since the walk
                    refused[cg.rel] = refused.get(cg.rel, frozenset()) | {reasons.CGROUP_VANISHED}
                    self._index.forget(cg)
                elif err.code != "NOT_SUPPORTED":
                    errors.append(err.call)
                continue
            out.append(
                DriverUsage(
                    c.namespace,
                    c.pod,
                    c.container,
                    d.index,
                    d.uuid,
                    NVML,
                    limit(got.soft, 0),
                    limit(got.hard, MEMORY_LIMIT_MAX),
                    got.used,
                )
            )
        return out

    def _scan_error(self, rel: str, err: OSError) -> None:
        log.v(4).info("Skipping cgroup %s: %s", rel or self._root, err)

    def _report(self, sources: Mapping[str, str]) -> None:
        """Log each source's state once, and again only when it changes."""
        for source, state in sources.items():
            if self._reported.get(source) == state:
                continue
            self._reported[source] = state
            if state == AVAILABLE:
                log.info("Reading the driver's per-container memory accounting through %s", source)
            else:
                log.warning(
                    "The driver's per-container memory accounting through %s is absent: %s", source, state
                )
