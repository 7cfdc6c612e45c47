"""The snapshot format's constants and dataclasses (what a snapshot holds), and ``SnapshotError``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from hami.core import annotations as ann

KIND: Final = "HAMiSchedulingSnapshot"
VERSION: Final = 3  # 2: outages; 3: pods' firstAttempt, goneSince (older versions are still read)
SOURCE_API: Final = "api"
SOURCE_PROMETHEUS: Final = "prometheus"
SOURCE_GENERATED: Final = "generated"
SOURCES: Final = (SOURCE_API, SOURCE_PROMETHEUS, SOURCE_GENERATED)

# Node annotations scheduling reads; a snapshot keeps these and nothing else of the node.
NODE_ANNOTATIONS: Final = (
    ann.NODE_REGISTER,
    ann.NODE_PAIR_SCORE,
    ann.NODE_DEVICE_CORDON,
    ann.NODE_HANDSHAKE,
    ann.NODE_LOCK,
)
# Pod annotations that steer the filter (users' choices); allocations are kept apart.
POD_ANNOTATIONS: Final = (
    ann.POD_NODE_SCHEDULER_POLICY,
    ann.POD_GPU_SCHEDULER_POLICY,
    ann.POD_DEVICE_SCORING_WEIGHTS,
    ann.POD_USE_GPUTYPE,
    ann.POD_NOUSE_GPUTYPE,
    ann.POD_USE_GPUUUID,
    ann.POD_NOUSE_GPUUUID,
    ann.POD_NUMA_BIND,
    ann.POD_VGPU_MODE,
    ann.POD_MEMORY_ENFORCEMENT,  # ours: fits only cards of that enforcement, so a replay must keep it
)
MAX_SCALING: Final = 100.0  # a device plugin scaling factor beyond this is a typo, not a setting


class SnapshotError(ValueError):
    """The file is not a usable snapshot; ``str()`` says where and what."""


@dataclass(frozen=True)
class Scheduler:
    """The scheduler's settings the replay needs (its flags and the device config's ``nvidia:``)."""

    scheduler_name: str = "hami-scheduler"
    node_policy: str = "binpack"  # --node-scheduler-policy
    gpu_policy: str = "spread"  # --gpu-scheduler-policy
    node_lock_expire: float = 300.0  # --node-lock-timeout, seconds
    device_config: Mapping[str, Any] = field(default_factory=dict)  # HAMi YAML keys of ``nvidia:``


@dataclass(frozen=True)
class Node:
    """A node as scheduling saw it when the snapshot was taken."""

    name: str
    annotations: Mapping[str, str]  # NODE_ANNOTATIONS present on the node, verbatim
    allocatable_gpus: int = 0
    schedulable: bool = True  # False: the scheduler had dropped it (expired handshake, bad annotation)
    reason: str = ""
    memory_scaling: float = 1.0  # deviceMemoryScaling its devices were registered with
    core_scaling: float = 1.0


@dataclass(frozen=True)
class Container:
    name: str
    resources: Mapping[str, Mapping[str, str]]  # ``limits`` / ``requests`` as in the pod spec


@dataclass(frozen=True)
class Allocation:
    """Where HAMi placed the pod: ``hami.io/vgpu-node`` and the allocation annotations, verbatim."""

    node: str
    devices: str  # hami.io/vgpu-devices-allocated
    mig: str = ""  # hami.io/vgpu-mig-allocations, "" when none


@dataclass(frozen=True)
class Pod:
    """A GPU pod's requests and history.

    ``scheduled`` is when HAMi's filter chose its node (``hami.io/vgpu-time``); a pod with an
    allocation but no ``scheduled`` was placed outside the scheduler (``spec.nodeName`` set by
    hand) and the replay keeps it where it is. ``finished`` is when it stopped holding its devices
    (completed, failed or deleted); None while it still runs or waits.
    """

    namespace: str
    name: str
    uid: str
    created: float
    annotations: Mapping[str, str] = field(default_factory=dict)
    init_containers: tuple[Container, ...] = ()
    containers: tuple[Container, ...] = ()
    scheduled: float | None = None
    finished: float | None = None
    allocation: Allocation | None = None
    peak_memory_bytes: float | None = None  # highest device memory it used, when known
    first_attempt: float | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def as_object(self) -> dict[str, Any]:
        """The pod as the API's JSON, reduced to what the filter reads."""

        body: dict[str, Any] = {"containers": _containers(self.containers)}
        if self.init_containers:
            body["initContainers"] = _containers(self.init_containers)
        meta = {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "annotations": dict(self.annotations),
        }
        return {"metadata": meta, "spec": body}


@dataclass(frozen=True)
class Quota:
    namespace: str
    name: str
    hard: Mapping[str, str]  # ResourceQuota ``spec.hard``

    def as_object(self) -> dict[str, Any]:
        return {
            "metadata": {"namespace": self.namespace, "name": self.name},
            "spec": {"hard": dict(self.hard)},
        }


@dataclass(frozen=True)
class Lock:
    """A node lock (``hami.io/mutex.lock``) held longer than a bind takes: it blocked binds."""

    node: str
    since: float
    owner: str = ""  # "namespace/name", "" for the legacy form
    released: float | None = None  # None: still held when the snapshot was taken


@dataclass(frozen=True)
class Outage:
    """A span the scheduler could not use a card (``device``: its UUID; unhealthy) or a whole node
    (``device`` ""; its handshake expired, its devices did not decode) within the history."""

    node: str
    since: float
    until: float | None = None  # None: still out when the snapshot was taken
    device: str = ""
    reason: str = ""


@dataclass(frozen=True)
class Snapshot:
    source: str
    taken: float
    start: float  # the history covers [start, taken]
    scheduler: Scheduler
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    quotas: tuple[Quota, ...] = ()
    locks: tuple[Lock, ...] = ()
    notes: tuple[str, ...] = ()  # assumptions the writer had to make, shown with every report
    version: int = VERSION
    # Health and registration over the history; a card or node without outages is as its annotation
    # says at ``taken`` throughout.
    outages: tuple[Outage, ...] = ()
    # The first placement of a GPU pod the snapshot no longer shows (deleted before it was taken; its
    # events name it): from then on it held cards the snapshot cannot replay, so pods placed later
    # are not compared. None: no such pod is known.
    gone_since: float | None = None


def _containers(cs: tuple[Container, ...]) -> list[dict[str, Any]]:
    return [{"name": c.name, "resources": {k: dict(v) for k, v in c.resources.items()}} for c in cs]
