"""What-if cases: small scheduling snapshots built by hand for the simulator's tests (a node from
its cards, a pod from its limits and times). Times are seconds after ``T0``."""

from __future__ import annotations

from collections.abc import Sequence

from hami.core import annotations as ann
from hami.core.codec.node_devices import encode_node_devices
from hami.core.codec.pod_devices import encode_pod_devices
from hami.core.devices import ContainerDevice
from hami.core.snapshot import model as snap
from hami.testing.builders import dev, limits

T0 = 1_750_000_000.0


def node(name: str, *cards: int, count: int = 10, scaling: float = 1.0, lock: str | None = None) -> snap.Node:
    """A node whose cards register ``cards`` MiB each (already scaled by ``scaling``)."""
    devices = [dev(f"{name}-gpu{i}", mem, count=count, index=i) for i, mem in enumerate(cards)]
    annotations = {ann.NODE_REGISTER: encode_node_devices(devices)}
    if lock is not None:
        annotations[ann.NODE_LOCK] = lock
    return snap.Node(name, annotations, allocatable_gpus=count * len(cards), memory_scaling=scaling)


def pod(
    name: str,
    at: float,
    *,
    gpu: int = 1,
    mem: int | None = None,
    cores: int | None = None,
    pct: int | None = None,
    until: float | None = None,
    placed: tuple[str, Sequence[str]] | None = None,
    scheduled: float | None = None,
    namespace: str = "default",
    annotations: dict[str, str] | None = None,
) -> snap.Pod:
    """A pod created at ``T0 + at``. ``placed`` = (node, card UUIDs) records where it went, at
    ``scheduled`` (default: when created; None with ``scheduled=-1``: placed outside the scheduler)."""
    allocation = None
    when: float | None = None
    if placed is not None:
        node_name, uuids = placed
        devices = [[ContainerDevice(u, ann.VENDOR_NVIDIA, mem or 0, cores or 0) for u in uuids]]
        allocation = snap.Allocation(node_name, encode_pod_devices(devices))
        when = None if scheduled == -1 else T0 + (at if scheduled is None else scheduled)
    return snap.Pod(
        namespace=namespace,
        name=name,
        uid=f"uid-{namespace}-{name}",
        created=T0 + at,
        annotations=annotations or {},
        containers=(snap.Container("main", {"limits": limits(gpu, mem, cores, pct)}),),
        scheduled=when,
        finished=None if until is None else T0 + until,
        allocation=allocation,
    )


def snapshot(
    nodes: Sequence[snap.Node],
    pods: Sequence[snap.Pod],
    *,
    end: float = 3600.0,
    node_policy: str = "binpack",
    gpu_policy: str = "spread",
    lock_expire: float = 300.0,
    locks: Sequence[snap.Lock] = (),
    quotas: Sequence[snap.Quota] = (),
) -> snap.Snapshot:
    return snap.Snapshot(
        source=snap.SOURCE_GENERATED,
        taken=T0 + end,
        start=T0,
        scheduler=snap.Scheduler(
            node_policy=node_policy, gpu_policy=gpu_policy, node_lock_expire=lock_expire
        ),
        nodes=tuple(nodes),
        pods=tuple(pods),
        quotas=tuple(quotas),
        locks=tuple(locks),
    )
