"""The container families by accounting source: HAMi-core's region and the driver's two (pure).

One family per quantity, the container labels of ``hami_vgpu_*`` plus ``source`` (``hami-core``,
``nvml``, ``dmem``), so that one dashboard panel shows a container whoever limits it, and a container
both limit shows both (docs/design/metrics-contract.md, "Accounting sources"):

* ``hami_vgpu_source_memory_used_bytes{source}``;
* ``hami_vgpu_source_memory_limit_bytes{source,limit}``: ``limit`` = ``soft`` | ``hard``, 0 = none
  (HAMi-core has a hard limit only);
* ``hami_vgpu_memory_accounting_gap_bytes{source}``: the driver source's use minus HAMi-core's for a
  container HAMi-core runs in: > 0 when the shim under-reports;
* ``hami_monitor_driver_source_available{source,reason}``: 1 and ``reason="available"``, or 0 and why
  the node lacks it.

HAMi-core rows come from containers with a region only: a container without one has no
self-reported use to show (its allocation's limits stay in ``hami_vgpu_memory_limit_bytes``).
"""

from __future__ import annotations

from collections.abc import Iterable

from hami.core.serve.families import Catalogue, Scrape
from hami.exporter.driver import AVAILABLE, NO_GPU
from hami.exporter.families import CTR_LABELS, ZONE
from hami.exporter.reconcile import accounting_gaps
from hami.exporter.view import NodeView

HAMI_CORE = "hami-core"
SOURCE_LABELS = (*CTR_LABELS, "source")


# The families above, in exposition order (the order declared).
SOURCE = Catalogue()
USED = SOURCE.gauge(
    "hami_vgpu_source_memory_used_bytes",
    "Container device memory in use, by accounting source: hami-core (the shim's own report), nvml "
    "(nvmlDeviceGetMemoryLimits_v1) or dmem (the cgroup's dmem.current)",
    SOURCE_LABELS,
)
LIMITS = SOURCE.gauge(
    "hami_vgpu_source_memory_limit_bytes",
    "Container device memory limit by accounting source and limit soft/hard, in bytes (0 = none)",
    (*SOURCE_LABELS, "limit"),
)
GAP = SOURCE.gauge(
    "hami_vgpu_memory_accounting_gap_bytes",
    "The driver's accounting of a container device's memory minus HAMi-core's self-reported use "
    "(> 0: the shim under-reports), by driver source",
    SOURCE_LABELS,
)
AVAILABLE_SOURCE = SOURCE.gauge(
    "hami_monitor_driver_source_available",
    "1 when the node gives the driver's per-container memory accounting through this source, else 0 "
    "with the reason (no_nvml, driver_too_old, not_supported, no_gpu, no_cgroup_root, cgroup_v1, "
    "no_dmem_controller)",
    ("source", "reason", "node", "zone"),
)


def source_series(view: NodeView, sources: Iterable[str], fams: Scrape) -> None:
    """The families above; ``sources``: every driver source, each exported in the availability gauge."""
    used, limits, gap, available = fams[USED], fams[LIMITS], fams[GAP], fams[AVAILABLE_SOURCE]
    node = view.node
    for c in view.containers:
        if not c.started:
            continue
        for d in c.devices:
            lv = (c.namespace, c.pod, c.container, str(d.index), d.uuid, node, ZONE, HAMI_CORE)
            used.add(lv, d.used_bytes)
            limits.add((*lv, "hard"), d.limit_bytes)
    for u in view.driver.usage:
        lv = (u.namespace, u.pod, u.container, str(u.vdevice_index), u.device_uuid, node, ZONE, u.source)
        used.add(lv, u.used)
        limits.add((*lv, "soft"), u.soft_limit)
        limits.add((*lv, "hard"), u.hard_limit)
    for u, diff in accounting_gaps(view.containers, view.driver.usage):
        gap.add(
            (u.namespace, u.pod, u.container, str(u.vdevice_index), u.device_uuid, node, ZONE, u.source), diff
        )
    states = view.driver.sources or {}
    for source in sources if states else ():  # none: no driver reader (a collector built without it)
        state = states.get(source, NO_GPU)
        available.add((source, state, node, ZONE), 1 if state == AVAILABLE else 0)
