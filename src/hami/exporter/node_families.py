"""The monitor's node-scoped families beside the GPU and container ones, each declared once and
filled from a ``NodeView`` (pure): unlimited processes, MIG identities, pod labels, the monitor's
own health and the truth reconciler's findings (docs/design/metric-families.md)."""

from __future__ import annotations

from collections.abc import Iterable

from hami.core.serve.families import Catalogue, Scrape
from hami.exporter.families import CTR_LABELS, LEGACY_CTR, ZONE
from hami.exporter.view import Counters, NodeView

REGION_STATES = ("ok", "initialising", "skipped")
UNLIMITED_LABELS = ("namespace", "pod", "container", "node", "zone", "reason")
MIG_LABELS = (*CTR_LABELS, "mig_uuid", "profile", "gpu_instance_id", "compute_instance_id")
POD_LABELS_BASE = ("namespace", "pod", "node")

# Every family here, in exposition order (the order declared).
NODE = Catalogue()
UNLIMITED = NODE.gauge(
    "hami_vgpu_unlimited_processes",
    "GPU processes of a container given HAMi vGPUs that run without HAMi-core (no memory or core "
    "limit), by reason control_disabled/no_cache_dir/no_region",
    UNLIMITED_LABELS,
)
# Only on a node with MIG allocations.
MIG_INFO = NODE.gauge(
    "hami_mig_device_info", "MIG runtime identity for a container allocation", MIG_LABELS, sparse=True
)
LEGACY_MIG_INFO = NODE.gauge(
    "MigInfo", "Mig device information for container", (*LEGACY_CTR, "instanceid"), legacy=True, sparse=True
)
# Only with pods to show; its allow-listed label names come per sample (``Family.add``'s ``names``).
POD_LABELS = NODE.info("hami_pod_labels", "Allow-listed pod labels, for joins", POD_LABELS_BASE, sparse=True)
REGIONS = NODE.gauge(
    "hami_monitor_regions", "Container regions by state at this scrape", ("state", "node", "zone")
)
REGION_SKIPS = NODE.counter(
    "hami_monitor_region_skips",
    "Times a region started being skipped or clamped for a reason (a region that stays broken "
    "counts once)",
    ("reason", "node", "zone"),
)
REGIONS_SKIPPED = NODE.gauge(
    "hami_monitor_regions_skipped",
    "Regions skipped or clamped at this scrape, by reason",
    ("reason", "node", "zone"),
)
NVML_ERRORS = NODE.counter("hami_monitor_nvml_errors", "Failed NVML calls, by call", ("call", "node", "zone"))
INCONSISTENCY = NODE.gauge(
    "hami_inconsistency",
    "Disagreements between the scheduler's allocations, HAMi-core's regions and NVML's processes on "
    "this node, by kind (allocation_without_region, region_without_pod, region_unreadable, "
    "memory_outside_hami)",
    ("kind", "node", "zone"),
)


def unlimited_series(view: NodeView, fams: Scrape) -> None:
    """``hami_vgpu_unlimited_processes``: the guide's "GPU not limited" branch, counted."""
    fam = fams[UNLIMITED]
    for u in view.unlimited:
        fam.add((u.namespace, u.pod, u.container, view.node, ZONE, u.reason), u.processes)


def mig_series(view: NodeView, fams: Scrape) -> None:
    """``hami_mig_device_info`` (and legacy ``MigInfo``) of the node's MIG allocations."""
    info, legacy = fams[MIG_INFO], fams.get(LEGACY_MIG_INFO)
    for m in view.migs:
        base = (m.namespace, m.pod, m.container, str(m.vdevice_index), m.device_uuid)
        identity = (m.mig_uuid, m.profile, str(m.gpu_instance_id), str(m.compute_instance_id))
        info.add((*base, view.node, ZONE, *identity), 1)
        if legacy is not None:
            legacy.add((*base, ZONE, str(m.gpu_instance_id)), 1)


def pod_label_series(view: NodeView, fams: Scrape) -> None:
    fam = fams[POD_LABELS]
    for p in view.pod_labels:
        names = (*POD_LABELS_BASE, *(k for k, _ in p.labels))
        fam.add((p.namespace, p.pod, view.node, *(v for _, v in p.labels)), 1, names)


def self_series(
    view: NodeView, counters: Counters, reasons: Iterable[str], calls: Iterable[str], fams: Scrape
) -> None:
    """The monitor's own health; node-scoped, so every series carries ``node`` (contract rule 4).
    Every skip reason and every NVML call in ``calls`` is exported from the start, at 0 until met."""
    regions, skips, skipped = fams[REGIONS], fams[REGION_SKIPS], fams[REGIONS_SKIPPED]
    nvml = fams[NVML_ERRORS]
    for state in REGION_STATES:
        regions.add((state, view.node, ZONE), view.regions.get(state, 0))
    for reason in reasons:
        skips.add((reason, view.node, ZONE), counters.region_skips.get(reason, 0))
        skipped.add((reason, view.node, ZONE), view.skipped.get(reason, 0))
    for call in sorted({*calls, *counters.nvml_errors}):
        nvml.add((call, view.node, ZONE), counters.nvml_errors.get(call, 0))


def inconsistency_series(view: NodeView, kinds: Iterable[str], fams: Scrape) -> None:
    """What the truth reconciler found at this scrape; every kind is exported, at 0 when clean."""
    family = fams[INCONSISTENCY]
    for kind in kinds:
        family.add((kind, view.node, ZONE), view.inconsistencies.get(kind, 0))
