"""The extender's scrape-time metric families (docs/design/scheduler-extender.md §7.1,
pre-2.9 names), without samples."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from hami.core.serve.families import Family

MIB = 1048576
ZONE = "vGPU"
_DEV = ("node", "device_uuid", "device_index", "device_type", "zone")
_LEGACY_DEV = ("nodeid", "deviceuuid", "deviceidx", "devicetype", "zone")


def _g(name: str, doc: str, labels: Sequence[str]) -> Family:
    return Family(name, "gauge", doc, tuple(labels))


def scheduler_families() -> tuple[Family, ...]:
    """The extender's scrape-time state families, without samples."""
    leader = _g("hami_scheduler_is_leader", "1 when this replica leads (binds and writes handshakes).", [])
    synced = _g("hami_scheduler_cache_synced", "1 once informers synced and a register pass completed.", [])
    pending = _g(
        "hami_scheduler_pending_pods",
        "Pods requesting HAMi resources in phase Pending, by namespace and the reason of the extender's "
        "latest decision (a Fit reason code, NotFiltered, WaitingForBind, NodeLockContention, Bound); "
        "exported by the leader only.",
        ["namespace", "reason"],
    )
    records = _g("hami_scheduler_decision_records", "Pods in the decision record (bounded LRU).", [])
    states = _g(
        "hami_scheduler_nodes",
        "Nodes by registration state (healthy, handshake_expired, unregistered, decode_error).",
        ["state"],
    )
    ages = _g(
        "hami_node_handshake_age_seconds",
        "Seconds since the timestamp in the node's "
        "hami.io/node-handshake annotation (resets when it is renewed).",
        ["node"],
    )
    held = _g(
        "hami_scheduler_node_lock_held",
        "1 while the node carries a hami.io/mutex.lock annotation.",
        ["node"],
    )
    schedulable = _g(
        "hami_scheduler_node_schedulable",
        "1 when the scheduler places GPU pods on the node, else 0 with the reason (handshake_expired, "
        "node_lock, decode_error, no_devices, unhealthy); reason is ok when schedulable.",
        ["node", "reason"],
    )
    return (leader, synced, pending, states, ages, held, schedulable, records)


class Allocation(NamedTuple):
    """HAMi's §7.1 families under their current names, in exposition order."""

    split: Family
    mem_limit: Family
    core_limit: Family
    mem_alloc: Family
    shared: Family
    core_alloc: Family
    overview: Family
    mem_ratio: Family
    mig_info: Family
    q_used: Family
    q_limit: Family
    v_mem: Family
    v_core: Family


def allocation_families() -> tuple[Allocation, list[Family]]:
    """HAMi's §7.1 families, current names and the pre-2.9 ones, without samples."""
    split = _g(
        "hami_gpu_split_limit",
        "Containers the GPU may hold at once: its split count (count in the register annotation). "
        "Named _limit, not _count: a _count suffix reads as a histogram's.",
        _DEV,
    )
    mem_limit = _g("hami_gpu_memory_limit_bytes", "Device memory limit for a certain GPU", _DEV)
    core_limit = _g("hami_gpu_core_limit_ratio", "Device core limit for a certain GPU", _DEV)
    mem_alloc = _g(
        "hami_gpu_memory_allocated_bytes",
        "Device memory allocated for a certain GPU",
        ["node", "device_uuid", "device_index", "device_cores", "device_type", "zone"],
    )
    shared = _g("hami_gpu_shared_count", "Number of containers sharing this GPU", _DEV)
    core_alloc = _g("hami_gpu_core_allocated_ratio", "Device core allocated for a certain GPU", _DEV)
    overview = _g(
        "hami_node_gpu_overview",
        "GPU overview on a certain node",
        [
            "node",
            "device_uuid",
            "device_index",
            "device_cores",
            "device_memory_limit",
            "device_type",
            "zone",
        ],
    )
    mem_ratio = _g(
        "hami_node_gpu_memory_allocated_ratio", "GPU Memory Allocated Percentage on a certain GPU", _DEV
    )
    mig_info = _g(
        "hami_node_gpu_mig_instance_info",
        "Realized MIG instance identity and scheduler placement",
        ["node", "device_uuid", "device_index", "mig_uuid", "profile", "gpu_instance_id",
         "compute_instance_id", "placement_start", "placement_size", "zone"],
    )
    q_used = _g(
        "hami_resource_quota_used",
        "resourcequota usage for a certain device",
        ["namespace", "quota_name", "limit", "zone"],
    )
    q_limit = _g(
        "hami_resource_quota_limit",
        "resourcequota limit for a certain device",
        ["namespace", "quota_name", "zone"],
    )
    v_mem = _g(
        "hami_vgpu_memory_allocated_bytes",
        "vGPU memory allocated from a container",
        ["namespace", "node", "pod", "container_index", "device_uuid", "zone"],
    )
    v_core = _g(
        "hami_vgpu_core_allocated_ratio",
        "vGPU core allocated from a container",
        ["namespace", "node", "pod", "container_index", "device_uuid", "zone"],
    )
    legacy = [
        _g("GPUDeviceMemoryLimit", "Device memory limit for a certain GPU", _LEGACY_DEV),
        _g("GPUDeviceCoreLimit", "Device memory core limit for a certain GPU", _LEGACY_DEV),
        _g(
            "GPUDeviceMemoryAllocated",
            "Device memory allocated for a certain GPU",
            ["nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype", "zone"],
        ),
        _g("GPUDeviceSharedNum", "Number of containers sharing this GPU", _LEGACY_DEV),
        _g("GPUDeviceCoreAllocated", "Device core allocated for a certain GPU", _LEGACY_DEV),
        _g(
            "nodeGPUOverview",
            "GPU overview on a certain node",
            ["nodeid", "deviceuuid", "deviceidx", "devicecores", "devicememorylimit", "devicetype", "zone"],
        ),
        _g(
            "nodeGPUMemoryPercentage",
            "GPU Memory Allocated Percentage on a certain GPU",
            ["nodeid", "deviceuuid", "deviceidx", "zone"],
        ),
        _g(
            "QuotaUsed",
            "resourcequota usage for a certain device",
            ["quotanamespace", "quotaName", "limit", "zone"],
        ),
        _g(
            "vGPUMemoryAllocated",
            "vGPU memory allocated from a container",
            ["podnamespace", "nodename", "podname", "containeridx", "deviceuuid", "zone"],
        ),
        _g(
            "vGPUCoreAllocated",
            "vGPU core allocated from a container",
            ["podnamespace", "nodename", "podname", "containeridx", "deviceuuid", "zone"],
        ),
        _g(
            "nodeGPUMigInstance",
            "GPU Sharing mode. 0 for hami-core, 1 for mig, 2 for mps",
            ["nodeid", "deviceuuid", "deviceidx", "migname", "zone"],
        ),
    ]
    current = Allocation(
        split, mem_limit, core_limit, mem_alloc, shared, core_alloc, overview, mem_ratio, mig_info,
        q_used, q_limit, v_mem, v_core,
    )
    return current, legacy


def state_families(legacy: bool) -> list[Family]:
    """Every family ``StateCollector`` yields, without samples."""
    current, old = allocation_families()
    return [*scheduler_families(), *current, *(old if legacy else ())]
