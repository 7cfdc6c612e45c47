"""The extender's scrape-time metric families (docs/design/scheduler-extender.md §7.1, pre-2.9
names), each declared once, with where its series come from (docs/design/metric-families.md).

``STATE`` and ``ALLOCATION`` hold every family in exposition order, in the order declared. A
per-device or per-pod family comes with its label values and its value per device (or per reserved
device of a pod): both of ``StateCollector``'s paths (rows for ``collect()``, ``SeriesText``'s kept
text for a rendered scrape) read them from ``DEVICES`` and ``PODS``. The others are filled by name
in ``StateCollector``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from hami.core.devices import DeviceInfo
from hami.core.serve.families import Catalogue, Declared, Labels
from hami.scheduler.engine.usage import DeviceShare

MIB = 1048576
ZONE = "vGPU"
Use = tuple[int, int, int]  # a device's (slots used, MiB used, cores used)
_DEV = ("node", "device_uuid", "device_index", "device_type", "zone")
_DEV_CORES = ("node", "device_uuid", "device_index", "device_cores", "device_type", "zone")
_OVERVIEW = (
    "node", "device_uuid", "device_index", "device_cores", "device_memory_limit", "device_type", "zone"
)
_LEGACY_DEV = ("nodeid", "deviceuuid", "deviceidx", "devicetype", "zone")
_LEGACY_CORES = ("nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype", "zone")
_LEGACY_OVERVIEW = (
    "nodeid", "deviceuuid", "deviceidx", "devicecores", "devicememorylimit", "devicetype", "zone"
)
_POD = ("namespace", "node", "pod", "container_index", "device_uuid", "zone")
_LEGACY_POD = ("podnamespace", "nodename", "podname", "containeridx", "deviceuuid", "zone")

# The extender's own state, filled by name in ``StateCollector._scheduler``.
STATE = Catalogue()
IS_LEADER = STATE.gauge(
    "hami_scheduler_is_leader", "1 when this replica leads (binds and writes handshakes)."
)
CACHE_SYNCED = STATE.gauge(
    "hami_scheduler_cache_synced", "1 once informers synced and a register pass completed."
)
PENDING_PODS = STATE.gauge(
    "hami_scheduler_pending_pods",
    "Pods requesting HAMi resources in phase Pending, by namespace and the reason of the extender's "
    "latest decision (a Fit reason code, NotFiltered, WaitingForBind, NodeLockContention, Bound); "
    "exported by the leader only.",
    ["namespace", "reason"],
)
NODES = STATE.gauge(
    "hami_scheduler_nodes",
    "Nodes by registration state (healthy, handshake_expired, unregistered, decode_error).",
    ["state"],
)
HANDSHAKE_AGE = STATE.gauge(
    "hami_node_handshake_age_seconds",
    "Seconds since the timestamp in the node's "
    "hami.io/node-handshake annotation (resets when it is renewed).",
    ["node"],
)
LOCK_HELD = STATE.gauge(
    "hami_scheduler_node_lock_held", "1 while the node carries a hami.io/mutex.lock annotation.", ["node"]
)
NODE_SCHEDULABLE = STATE.gauge(
    "hami_scheduler_node_schedulable",
    "1 when the scheduler places GPU pods on the node, else 0 with the reason (handshake_expired, "
    "node_lock, decode_error, no_devices, unhealthy); reason is ok when schedulable.",
    ["node", "reason"],
)
DECISION_RECORDS = STATE.gauge(
    "hami_scheduler_decision_records", "Pods in the decision record (bounded LRU)."
)


class DeviceColumn(NamedTuple):
    """A family with one series per device: its label values and its value (None: no series)."""

    declared: Declared
    labels: Callable[[str, DeviceInfo], Labels]  # (node name, device)
    value: Callable[[DeviceInfo, Use], float | None]


class PodColumn(NamedTuple):
    """A family with one series per reserved device of a pod (labels: ``pod_labels``)."""

    declared: Declared
    value: Callable[[DeviceShare], int]


def _base(name: str, d: DeviceInfo) -> Labels:
    return (name, d.id, str(d.index), d.type, ZONE)


def _cores(name: str, d: DeviceInfo) -> Labels:
    return (name, d.id, str(d.index), str(d.devcore), d.type, ZONE)


def _overview(name: str, d: DeviceInfo) -> Labels:
    return (name, d.id, str(d.index), str(d.devcore), str(d.devmem), d.type, ZONE)


def _no_type(name: str, d: DeviceInfo) -> Labels:
    return (name, d.id, str(d.index), ZONE)


def _ratio(d: DeviceInfo, use: Use) -> float | None:
    return use[1] / d.devmem if d.devmem > 0 else None


# HAMi's §7.1 families, current names then the pre-2.9 ones, declared in exposition order. A family
# with one series per device (or per reserved device of a pod) is declared with ``_device`` (``_pod``),
# the others are filled by name in ``StateCollector._allocations``.
ALLOCATION = Catalogue()
DEVICES: list[DeviceColumn] = []
PODS: list[PodColumn] = []


def _device(declared: Declared, labels: Callable[[str, DeviceInfo], Labels],
            value: Callable[[DeviceInfo, Use], float | None]) -> None:
    DEVICES.append(DeviceColumn(declared, labels, value))


def _pod(declared: Declared, value: Callable[[DeviceShare], int]) -> None:
    PODS.append(PodColumn(declared, value))


# Integer values stay ints: they render as the same float text, and ``number`` caches it.
_MEM_LIMIT = "Device memory limit for a certain GPU"
_MEM_ALLOC = "Device memory allocated for a certain GPU"
_SHARED = "Number of containers sharing this GPU"
_CORE_ALLOC = "Device core allocated for a certain GPU"
_OVERVIEW_DOC = "GPU overview on a certain node"
_MEM_RATIO = "GPU Memory Allocated Percentage on a certain GPU"
_V_MEM = "vGPU memory allocated from a container"
_V_CORE = "vGPU core allocated from a container"
_g = ALLOCATION.gauge
_device(_g(
    "hami_gpu_split_limit",
    "Containers the GPU may hold at once: its split count (count in the register annotation). "
    "Named _limit, not _count: a _count suffix reads as a histogram's.",
    _DEV,
), _base, lambda d, use: d.count)
_device(_g("hami_gpu_memory_limit_bytes", _MEM_LIMIT, _DEV), _base, lambda d, use: d.devmem * MIB)
_device(_g("hami_gpu_core_limit_ratio", "Device core limit for a certain GPU", _DEV), _base,
        lambda d, use: d.devcore)
_device(_g("hami_gpu_memory_allocated_bytes", _MEM_ALLOC, _DEV_CORES), _cores, lambda d, use: use[1] * MIB)
_device(_g("hami_gpu_shared_count", _SHARED, _DEV), _base, lambda d, use: use[0])
_device(_g("hami_gpu_core_allocated_ratio", _CORE_ALLOC, _DEV), _base, lambda d, use: use[2])
_device(_g("hami_node_gpu_overview", _OVERVIEW_DOC, _OVERVIEW), _overview, lambda d, use: use[1] * MIB)
_device(_g("hami_node_gpu_memory_allocated_ratio", _MEM_RATIO, _DEV), _base, _ratio)
MIG_INFO = _g(
    "hami_node_gpu_mig_instance_info",
    "Realized MIG instance identity and scheduler placement",
    ["node", "device_uuid", "device_index", "mig_uuid", "profile", "gpu_instance_id",
     "compute_instance_id", "placement_start", "placement_size", "zone"],
)
QUOTA_USED = _g(
    "hami_resource_quota_used",
    "resourcequota usage for a certain device",
    ["namespace", "quota_name", "limit", "zone"],
)
QUOTA_LIMIT = _g(
    "hami_resource_quota_limit",
    "resourcequota limit for a certain device",
    ["namespace", "quota_name", "zone"],
)
_pod(_g("hami_vgpu_memory_allocated_bytes", _V_MEM, _POD), lambda s: s.usedmem * MIB)
_pod(_g("hami_vgpu_core_allocated_ratio", _V_CORE, _POD), lambda s: s.usedcores)
_device(_g("GPUDeviceMemoryLimit", _MEM_LIMIT, _LEGACY_DEV, legacy=True), _base,
        lambda d, use: d.devmem * MIB)
_device(_g("GPUDeviceCoreLimit", "Device memory core limit for a certain GPU", _LEGACY_DEV, legacy=True),
        _base, lambda d, use: d.devcore)
_device(_g("GPUDeviceMemoryAllocated", _MEM_ALLOC, _LEGACY_CORES, legacy=True), _cores,
        lambda d, use: use[1] * MIB)
_device(_g("GPUDeviceSharedNum", _SHARED, _LEGACY_DEV, legacy=True), _base, lambda d, use: use[0])
_device(_g("GPUDeviceCoreAllocated", _CORE_ALLOC, _LEGACY_DEV, legacy=True), _base, lambda d, use: use[2])
_device(_g("nodeGPUOverview", _OVERVIEW_DOC, _LEGACY_OVERVIEW, legacy=True), _overview,
        lambda d, use: use[1] * MIB)
_device(_g("nodeGPUMemoryPercentage", _MEM_RATIO, ["nodeid", "deviceuuid", "deviceidx", "zone"], legacy=True),
        _no_type, _ratio)
LEGACY_QUOTA_USED = _g(
    "QuotaUsed", "resourcequota usage for a certain device", ["quotanamespace", "quotaName", "limit", "zone"],
    legacy=True,
)
_pod(_g("vGPUMemoryAllocated", _V_MEM, _LEGACY_POD, legacy=True), lambda s: s.usedmem * MIB)
_pod(_g("vGPUCoreAllocated", _V_CORE, _LEGACY_POD, legacy=True), lambda s: s.usedcores)
LEGACY_MIG = _g(
    "nodeGPUMigInstance",
    "GPU Sharing mode. 0 for hami-core, 1 for mig, 2 for mps",
    ["nodeid", "deviceuuid", "deviceidx", "migname", "zone"],
    legacy=True,
)


def device_columns(legacy: bool) -> tuple[DeviceColumn, ...]:
    """The per-device families exported, in exposition order."""
    return tuple(c for c in DEVICES if legacy or not c.declared.legacy)


def pod_columns(legacy: bool) -> tuple[PodColumn, ...]:
    """The per-pod families exported, in exposition order."""
    return tuple(c for c in PODS if legacy or not c.declared.legacy)


def pod_labels(namespace: str, node: str, pod: str, share: DeviceShare) -> Labels:
    """The label values of a reserved device's series in every ``PodColumn`` family."""
    return (namespace, node, pod, "0", share.uuid, ZONE)


def state_families(legacy: bool) -> list[Declared]:
    """Every family ``StateCollector`` yields, in exposition order."""
    return [*STATE, *ALLOCATION.declared(legacy)]
