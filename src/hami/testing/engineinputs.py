"""The scheduling engine's state for tests and benchmarks: nodes, usage and quotas, built from plain
values and read back as plain values."""

from __future__ import annotations

from hami.core.devices import DeviceInfo
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.usage import DeviceShare, PodAllocation, UsageIndex


def node_state(name: str, *devices: DeviceInfo, cordoned: tuple[str, ...] = ()) -> NodeState:
    return NodeState(name, tuple(devices), frozenset(cordoned))


def usage(*entries: tuple[str, str, int, int, int], namespace: str = "other") -> UsageIndex:
    """Usage from (node, uuid, slots, MiB, cores) entries, one holder pod per entry."""
    index = UsageIndex()
    for i, (node_name, uuid, slots, mem, cores) in enumerate(entries):
        index.add(PodAllocation(f"holder-{i}", namespace, f"holder-{i}", node_name,
                                (DeviceShare(uuid, mem, cores, slots),)))
    return index


def quota_snapshot(quotas: QuotaManager) -> list[tuple[str, str, int, int]]:
    """(namespace, resource, used, limit) of every quota entry: values, not the manager's live entries."""
    return sorted((ns, name, e.used, e.limit) for ns, name, e in quotas.items())
