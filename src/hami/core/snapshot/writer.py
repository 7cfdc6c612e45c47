"""Writing a snapshot: the dataclasses as the JSON document of docs/design/snapshot.md."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hami.core.snapshot.model import KIND, VERSION, Snapshot, _containers


def format_time(t: float) -> str:
    """RFC 3339 in UTC; a fraction only when the time has one (the API's times are whole seconds)."""
    when = datetime.fromtimestamp(t, UTC)
    if t == int(t):
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _opt_time(t: float | None) -> str | None:
    return None if t is None else format_time(t)


def to_document(snap: Snapshot) -> dict[str, Any]:
    """The snapshot as the JSON document of docs/design/snapshot.md."""
    s = snap.scheduler
    return {
        "kind": KIND,
        "version": VERSION,  # what this writer writes, whichever version was read
        "source": snap.source,
        "taken": format_time(snap.taken),
        "start": format_time(snap.start),
        "goneSince": _opt_time(snap.gone_since),
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
                "firstAttempt": _opt_time(p.first_attempt),
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
        "outages": [
            {
                "node": o.node,
                "device": o.device,
                "since": format_time(o.since),
                "until": _opt_time(o.until),
                "reason": o.reason,
            }
            for o in snap.outages
        ],
    }


def dumps(snap: Snapshot) -> str:
    return json.dumps(to_document(snap), indent=1, sort_keys=False) + "\n"


def save_snapshot(snap: Snapshot, path: Path) -> None:
    path.write_text(dumps(snap), encoding="utf-8")
