"""Scheduling snapshots: what HAMi's scheduling depended on over a window, as versioned JSON.

``hami-doctor snapshot`` writes one (from the API server or from Prometheus history) and
``hami-tune simulate`` replays it. The format is documented in ``docs/design/snapshot.md``; this
module is its only reader and writer. ``load_snapshot`` checks every field and raises
``SnapshotError`` whose text names the field (``pods[3].created: ...``), so a bad file is one clear
line, never a traceback.

Times are Unix seconds in memory and RFC 3339 in the file. Annotation values are kept verbatim, so
the replay decodes them with the same codecs as the scheduler.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeVar

from hami.core import annotations as ann
from hami.core.codec.errors import CodecError
from hami.core.codec.nodelock import parse_rfc3339

KIND: Final = "HAMiSchedulingSnapshot"
VERSION: Final = 1
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
)
_MAX_BYTES: Final = 1 << 30  # refuse to parse more than 1 GiB of JSON
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


# --- writing ------------------------------------------------------------------------------------


def format_time(t: float) -> str:
    """RFC 3339 in UTC; a fraction only when the time has one (the API's times are whole seconds)."""
    when = datetime.fromtimestamp(t, UTC)
    if t == int(t):
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _opt_time(t: float | None) -> str | None:
    return None if t is None else format_time(t)


def _containers(cs: tuple[Container, ...]) -> list[dict[str, Any]]:
    return [{"name": c.name, "resources": {k: dict(v) for k, v in c.resources.items()}} for c in cs]


def to_document(snap: Snapshot) -> dict[str, Any]:
    """The snapshot as the JSON document of docs/design/snapshot.md."""
    s = snap.scheduler
    return {
        "kind": KIND,
        "version": snap.version,
        "source": snap.source,
        "taken": format_time(snap.taken),
        "start": format_time(snap.start),
        "notes": list(snap.notes),
        "scheduler": {
            "schedulerName": s.scheduler_name,
            "nodeSchedulerPolicy": s.node_policy,
            "gpuSchedulerPolicy": s.gpu_policy,
            "nodeLockExpireSeconds": s.node_lock_expire,
            "deviceConfig": dict(s.device_config),
        },
        "nodes": [
            {
                "name": n.name,
                "annotations": dict(n.annotations),
                "allocatableGPUs": n.allocatable_gpus,
                "schedulable": n.schedulable,
                "reason": n.reason,
                "deviceMemoryScaling": n.memory_scaling,
                "deviceCoreScaling": n.core_scaling,
            }
            for n in snap.nodes
        ],
        "pods": [
            {
                "namespace": p.namespace,
                "name": p.name,
                "uid": p.uid,
                "annotations": dict(p.annotations),
                "initContainers": _containers(p.init_containers),
                "containers": _containers(p.containers),
                "created": format_time(p.created),
                "scheduled": _opt_time(p.scheduled),
                "finished": _opt_time(p.finished),
                "allocation": None
                if p.allocation is None
                else {
                    "node": p.allocation.node,
                    "devices": p.allocation.devices,
                    "mig": p.allocation.mig,
                },
                "peakMemoryBytes": p.peak_memory_bytes,
            }
            for p in snap.pods
        ],
        "quotas": [{"namespace": q.namespace, "name": q.name, "hard": dict(q.hard)} for q in snap.quotas],
        "locks": [
            {
                "node": lk.node,
                "since": format_time(lk.since),
                "owner": lk.owner,
                "released": _opt_time(lk.released),
            }
            for lk in snap.locks
        ],
    }


def dumps(snap: Snapshot) -> str:
    return json.dumps(to_document(snap), indent=1, sort_keys=False) + "\n"


def save_snapshot(snap: Snapshot, path: Path) -> None:
    path.write_text(dumps(snap), encoding="utf-8")


# --- reading ------------------------------------------------------------------------------------

T = TypeVar("T")


class _Reader:
    """Typed access to one JSON object with its path for error messages; unknown keys are errors."""

    def __init__(self, value: Any, where: str, known: Sequence[str]) -> None:
        if not isinstance(value, dict):
            raise SnapshotError(f"{where or 'document'}: expected an object, got {_kind(value)}")
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise SnapshotError(
                f"{where or 'document'}: unknown field {unknown[0]!r} (known: {', '.join(known)})"
            )
        self.obj: dict[str, Any] = value
        self.where = where

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, check: Callable[[Any, str], T], default: T | None = None) -> T:
        if key not in self.obj or self.obj[key] is None:
            if default is None:
                raise SnapshotError(f"{self.path(key)}: required")
            return default
        return check(self.obj[key], self.path(key))

    def optional(self, key: str, check: Callable[[Any, str], T]) -> T | None:
        value = self.obj.get(key)
        return None if value is None else check(value, self.path(key))


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise SnapshotError(f"{where}: expected a string, got {_kind(value)}")
    return value


def _name(value: Any, where: str) -> str:
    text = _str(value, where)
    if not text:
        raise SnapshotError(f"{where}: must not be empty")
    return text


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise SnapshotError(f"{where}: expected true or false, got {_kind(value)}")
    return value


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SnapshotError(f"{where}: expected a non-negative integer, got {value!r}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise SnapshotError(f"{where}: expected a non-negative number, got {value!r}")
    return float(value)


def _positive(value: Any, where: str) -> float:
    number = _number(value, where)
    if number <= 0:
        raise SnapshotError(f"{where}: must be greater than 0, got {value!r}")
    return number


def _scaling(value: Any, where: str) -> float:
    number = _positive(value, where)
    if number > MAX_SCALING:
        raise SnapshotError(f"{where}: at most {MAX_SCALING:g}, got {value!r}")
    return number


def _time(value: Any, where: str) -> float:
    text = _str(value, where)
    try:
        return parse_rfc3339(text, where).timestamp()
    except CodecError:
        raise SnapshotError(f"{where}: not an RFC 3339 time (e.g. 2025-06-01T12:00:00Z): {text!r}") from None


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SnapshotError(f"{where}: expected an object, got {_kind(value)}")
    return value


def _str_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SnapshotError(f"{where}: expected an object, got {_kind(value)}")
    for k, v in value.items():
        if not isinstance(v, str):
            raise SnapshotError(f"{where}.{k}: expected a string, got {_kind(v)}")
    return dict(value)


def _list(value: Any, where: str, item: Callable[[Any, str], T]) -> tuple[T, ...]:
    if not isinstance(value, list):
        raise SnapshotError(f"{where}: expected a list, got {_kind(value)}")
    return tuple(item(v, f"{where}[{i}]") for i, v in enumerate(value))


def _quantity(value: Any, where: str) -> str:
    # Quantities stay text: the filter parses them exactly as it parses a pod's.
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise SnapshotError(f"{where}: expected a quantity string, got {_kind(value)}")
    return str(value)


def _resources(value: Any, where: str) -> dict[str, dict[str, str]]:
    r = _Reader(value, where, ("limits", "requests"))
    out: dict[str, dict[str, str]] = {}
    for section in ("limits", "requests"):
        raw = r.optional(section, _object)
        if raw is not None:
            out[section] = {str(k): _quantity(v, f"{r.path(section)}.{k}") for k, v in raw.items()}
    return out


def _container(value: Any, where: str) -> Container:
    r = _Reader(value, where, ("name", "resources"))
    return Container(r.get("name", _str, ""), r.get("resources", _resources, {}))


def _scheduler(value: Any, where: str) -> Scheduler:
    r = _Reader(
        value,
        where,
        (
            "schedulerName",
            "nodeSchedulerPolicy",
            "gpuSchedulerPolicy",
            "nodeLockExpireSeconds",
            "deviceConfig",
        ),
    )
    config: dict[str, Any] = r.get("deviceConfig", _object, {})
    d = Scheduler()
    return Scheduler(
        scheduler_name=r.get("schedulerName", _name, d.scheduler_name),
        node_policy=r.get("nodeSchedulerPolicy", _name, d.node_policy),
        gpu_policy=r.get("gpuSchedulerPolicy", _name, d.gpu_policy),
        node_lock_expire=r.get("nodeLockExpireSeconds", _positive, d.node_lock_expire),
        device_config=config,
    )


def _node(value: Any, where: str) -> Node:
    r = _Reader(
        value,
        where,
        (
            "name",
            "annotations",
            "allocatableGPUs",
            "schedulable",
            "reason",
            "deviceMemoryScaling",
            "deviceCoreScaling",
        ),
    )
    annotations: dict[str, str] = r.get("annotations", _str_map, {})
    if ann.NODE_REGISTER not in annotations:
        raise SnapshotError(
            f"{r.path('annotations')}: no {ann.NODE_REGISTER} (a node without devices "
            "does not belong in a snapshot)"
        )
    return Node(
        name=r.get("name", _name),
        annotations=annotations,
        allocatable_gpus=r.get("allocatableGPUs", _int, 0),
        schedulable=r.get("schedulable", _bool, True),
        reason=r.get("reason", _str, ""),
        memory_scaling=r.get("deviceMemoryScaling", _scaling, 1.0),
        core_scaling=r.get("deviceCoreScaling", _scaling, 1.0),
    )


def _allocation(value: Any, where: str) -> Allocation:
    r = _Reader(value, where, ("node", "devices", "mig"))
    return Allocation(r.get("node", _name), r.get("devices", _str), r.get("mig", _str, ""))


def _pod(value: Any, where: str) -> Pod:
    r = _Reader(
        value,
        where,
        (
            "namespace",
            "name",
            "uid",
            "annotations",
            "initContainers",
            "containers",
            "created",
            "scheduled",
            "finished",
            "allocation",
            "peakMemoryBytes",
        ),
    )
    pod = Pod(
        namespace=r.get("namespace", _name),
        name=r.get("name", _name),
        uid=r.get("uid", _name),
        created=r.get("created", _time),
        annotations=r.get("annotations", _str_map, {}),
        init_containers=r.get("initContainers", lambda v, w: _list(v, w, _container), ()),
        containers=r.get("containers", lambda v, w: _list(v, w, _container), ()),
        scheduled=r.optional("scheduled", _time),
        finished=r.optional("finished", _time),
        allocation=r.optional("allocation", _allocation),
        peak_memory_bytes=r.optional("peakMemoryBytes", _number),
    )
    if not pod.containers:
        raise SnapshotError(f"{r.path('containers')}: a pod needs at least one container")
    if pod.finished is not None and pod.finished < pod.created:
        raise SnapshotError(f"{r.path('finished')}: before the pod was created")
    if pod.scheduled is not None and pod.allocation is None:
        raise SnapshotError(f"{r.path('allocation')}: required when 'scheduled' is set")
    return pod


def _quota(value: Any, where: str) -> Quota:
    r = _Reader(value, where, ("namespace", "name", "hard"))
    hard = r.get("hard", lambda v, w: {str(k): _quantity(x, f"{w}.{k}") for k, x in _object(v, w).items()})
    return Quota(r.get("namespace", _name), r.get("name", _str, ""), hard)


def _lock(value: Any, where: str) -> Lock:
    r = _Reader(value, where, ("node", "since", "owner", "released"))
    lock = Lock(
        r.get("node", _name), r.get("since", _time), r.get("owner", _str, ""), r.optional("released", _time)
    )
    if lock.released is not None and lock.released < lock.since:
        raise SnapshotError(f"{r.path('released')}: before 'since'")
    return lock


def from_document(doc: Any) -> Snapshot:
    """Check a parsed document and build the snapshot; raises ``SnapshotError``."""
    if isinstance(doc, dict) and doc.get("kind") != KIND:
        raise SnapshotError(f"kind: expected {KIND!r}, got {doc.get('kind')!r} (not a snapshot file)")
    if isinstance(doc, dict) and isinstance(doc.get("version"), int) and doc["version"] > VERSION:
        raise SnapshotError(
            f"version: {doc['version']} is newer than this tool reads ({VERSION}); upgrade hami"
        )
    r = _Reader(
        doc,
        "",
        (
            "kind",
            "version",
            "source",
            "taken",
            "start",
            "notes",
            "scheduler",
            "nodes",
            "pods",
            "quotas",
            "locks",
        ),
    )
    version = r.get("version", _int)
    if version != VERSION:
        raise SnapshotError(f"version: {version} is not a snapshot version this tool reads ({VERSION})")
    source = r.get("source", _str)
    if source not in SOURCES:
        raise SnapshotError(f"source: expected one of {', '.join(SOURCES)}, got {source!r}")
    snap = Snapshot(
        source=source,
        taken=r.get("taken", _time),
        start=r.get("start", _time),
        scheduler=r.get("scheduler", _scheduler, Scheduler()),
        nodes=r.get("nodes", lambda v, w: _list(v, w, _node)),
        pods=r.get("pods", lambda v, w: _list(v, w, _pod), ()),
        quotas=r.get("quotas", lambda v, w: _list(v, w, _quota), ()),
        locks=r.get("locks", lambda v, w: _list(v, w, _lock), ()),
        notes=r.get("notes", lambda v, w: _list(v, w, _str), ()),
        version=version,
    )
    _check_unique(snap)
    return snap


def _check_unique(snap: Snapshot) -> None:
    if snap.start > snap.taken:
        raise SnapshotError("start: after 'taken'")
    names: set[str] = set()
    for i, n in enumerate(snap.nodes):
        if n.name in names:
            raise SnapshotError(f"nodes[{i}].name: {n.name!r} appears twice")
        names.add(n.name)
    uids: set[str] = set()
    for i, p in enumerate(snap.pods):
        if p.uid in uids:
            raise SnapshotError(f"pods[{i}].uid: {p.uid!r} appears twice")
        uids.add(p.uid)
        if p.allocation is not None and p.allocation.node not in names:
            raise SnapshotError(f"pods[{i}].allocation.node: {p.allocation.node!r} is not among the nodes")


def loads(text: str | bytes) -> Snapshot:
    try:
        doc = json.loads(text)
    except RecursionError:
        raise SnapshotError("not JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise SnapshotError(f"not JSON: {exc}") from None
    return from_document(doc)


def load_snapshot(path: Path) -> Snapshot:
    """Read and check a snapshot file; every problem is a ``SnapshotError`` that names the file."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_BYTES + 1)
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > _MAX_BYTES:
        raise SnapshotError(f"{path}: larger than {_MAX_BYTES >> 20} MiB")
    try:
        return loads(data)
    except SnapshotError as exc:
        raise SnapshotError(f"{path}: {exc}") from None
