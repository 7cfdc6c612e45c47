"""Reading a snapshot: checks every field of the JSON document and builds the dataclasses."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from hami.core import annotations as ann
from hami.core.codec.errors import CodecError
from hami.core.codec.nodelock import parse_rfc3339
from hami.core.snapshot.model import (
    KIND,
    MAX_SCALING,
    SOURCES,
    VERSION,
    Allocation,
    Container,
    Lock,
    Node,
    Outage,
    Pod,
    Quota,
    Scheduler,
    Snapshot,
    SnapshotError,
)

OUTAGES_SINCE: Final = 2  # the version that added ``outages``
_MAX_BYTES: Final = 1 << 30  # refuse to parse more than 1 GiB of JSON

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
            "firstAttempt",
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
        first_attempt=r.optional("firstAttempt", _time),
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


def _outage(value: Any, where: str) -> Outage:
    r = _Reader(value, where, ("node", "device", "since", "until", "reason"))
    out = Outage(
        r.get("node", _name),
        r.get("since", _time),
        r.optional("until", _time),
        r.get("device", _str, ""),
        r.get("reason", _str, ""),
    )
    if out.until is not None and out.until < out.since:
        raise SnapshotError(f"{r.path('until')}: before 'since'")
    return out


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
            "outages",
            "goneSince",
        ),
    )
    version = r.get("version", _int)
    if not 1 <= version <= VERSION:
        raise SnapshotError(f"version: {version} is not a snapshot version this tool reads (1 to {VERSION})")
    if version < OUTAGES_SINCE and "outages" in doc:
        raise SnapshotError("outages: not a field of a version 1 snapshot")
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
        outages=r.get("outages", lambda v, w: _list(v, w, _outage), ()),
        gone_since=r.optional("goneSince", _time),
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
