"""A snapshot under a scenario as the scheduling engine's inputs: node states, filter config, quotas.

This is the only module of the simulator that knows the engine's types besides the replay's
(``records``, ``engine_state``, ``order_search``, ``sampling``, ``replay``): node annotations
are decoded with the scheduler's own codecs, the device plugin's configuration is applied the way
the plugin registers cards (``devmem`` = physical MiB × deviceMemoryScaling, truncated;
``count`` = deviceSplitCount; ``devcore`` = deviceCoreScaling × 100; MIG cards keep their
instance count and memory), and pods placed outside the scheduler become reservations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from hami.core.codec.errors import CodecError
from hami.core.codec.mig import decode_mig_allocations
from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.devices import MODE_MIG, DeviceInfo, PodDevices
from hami.core.snapshot import model as snap
from hami.scheduler.engine.decision import FilterConfig
from hami.scheduler.engine.device_config import DeviceConfigError, NvidiaConfig, load_nvidia_config
from hami.scheduler.engine.mig import unreserved
from hami.scheduler.engine.nodes import NodeState, Unregistered
from hami.scheduler.engine.nodes import node_state as engine_node_state
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.usage import PodAllocation, collapse_init_containers
from hami.tune.simulate.scenario import Scenario


class ClusterError(ValueError):
    """The snapshot's configuration cannot drive the engine (e.g. a bad device config)."""


@dataclass(frozen=True)
class Cluster:
    """Engine inputs for one replay; ``nodes`` keeps the snapshot's order (ties go to the first)."""

    nodes: tuple[NodeState, ...]
    by_name: Mapping[str, NodeState]
    physical_mib: Mapping[str, int]  # per card: registered memory without deviceMemoryScaling
    skipped: Mapping[str, str]  # node -> why the scheduler could not use it
    config: FilterConfig
    lock_expire: float


def physical_mib(registered: int, scaling: float) -> int:
    """The card's memory before the plugin scaled it (the nearest MiB: the plugin truncated)."""
    return registered if scaling == 1 else round(registered / scaling)


def _card(d: DeviceInfo, node: snap.Node, s: Scenario) -> DeviceInfo:
    if d.mode == MODE_MIG:
        return d
    physical = physical_mib(d.devmem, node.memory_scaling)
    scaling = s.node_memory_scaling.get(node.name, s.memory_scaling)
    devmem = d.devmem if scaling is None else (physical if scaling == 1 else int(physical * scaling))
    count = s.node_split_count.get(node.name, s.split_count)
    devcore = d.devcore if s.core_scaling is None else int(s.core_scaling * 100)
    return replace(d, devmem=devmem, count=d.count if count is None else count, devcore=devcore)


def node_state(node: snap.Node, s: Scenario) -> tuple[NodeState, dict[str, int]] | str:
    """The node as the extender's register pass builds it, with the scenario applied, and each
    card's physical MiB; or why the scheduler could not use it."""
    if not node.schedulable:
        return node.reason or "not schedulable"
    state = engine_node_state(node.name, node.annotations)
    if isinstance(state, Unregistered):
        return state.reason
    physical = {
        d.id: d.devmem if d.mode == MODE_MIG else physical_mib(d.devmem, node.memory_scaling)
        for d in state.devices
    }
    return replace(state, devices=tuple(_card(d, node, s) for d in state.devices)), physical


def nvidia_config(snapshot: snap.Snapshot) -> NvidiaConfig:
    try:
        return load_nvidia_config({"nvidia": dict(snapshot.scheduler.device_config)})
    except DeviceConfigError as err:
        raise ClusterError(f"scheduler.deviceConfig: {err}") from None


def build(snapshot: snap.Snapshot, s: Scenario) -> Cluster:
    nodes: list[NodeState] = []
    skipped: dict[str, str] = {}
    physical: dict[str, int] = {}
    for node in snapshot.nodes:
        built = node_state(node, s)
        if isinstance(built, str):
            skipped[node.name] = built
            continue
        nodes.append(built[0])
        physical.update(built[1])
    sched = snapshot.scheduler
    config = FilterConfig(
        nvidia=nvidia_config(snapshot),
        node_policy=s.node_policy or sched.node_policy,
        gpu_policy=s.gpu_policy or sched.gpu_policy,
    )
    return Cluster(
        nodes=tuple(nodes),
        by_name={n.name: n for n in nodes},
        physical_mib=physical,
        skipped=skipped,
        config=config,
        lock_expire=s.node_lock_expire or sched.node_lock_expire,
    )


def quotas(snapshot: snap.Snapshot, config: FilterConfig) -> QuotaManager:
    manager = QuotaManager(config.nvidia)
    for q in snapshot.quotas:
        manager.add_quota(q.as_object())
    return manager


def recorded_devices(pod: snap.Pod) -> PodDevices | None:
    """The devices the pod was given, or None when its annotation does not decode."""
    if pod.allocation is None:
        return None
    try:
        return decode_pod_devices(pod.allocation.devices)
    except CodecError:
        return None


def reservation(pod: snap.Pod) -> PodAllocation | None:
    """A pod placed outside the scheduler as the usage index holds it (the extender's pod informer)."""
    devices = recorded_devices(pod)
    if pod.allocation is None or devices is None:
        return None
    try:
        mig = tuple(decode_mig_allocations(pod.allocation.mig)) if pod.allocation.mig else ()
    except CodecError:
        mig = ()
    shares = collapse_init_containers(devices, len(pod.init_containers))
    return PodAllocation(
        pod.uid, pod.namespace, pod.name, pod.allocation.node, shares, mig, unreserved(devices, mig)
    )
