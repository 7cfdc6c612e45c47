"""Pod-side checks that need no tree: HAMi resources, schedulerName, the scheduler's own pods."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hami.core import annotations as ann
from hami.core.codec import CodecError
from hami.core.codec.nodelock import parse_rfc3339
from hami.core.codec.quantity import parse_quantity
from hami.core.objects import labels_of, name_of, namespace_of
from hami.doctor.findings import BROKEN, OK, WARNING, Finding
from hami.doctor.nodeprotocol import age
from hami.doctor.settings import (
    GET_SCHEDULER,
    RESTART_SCHEDULER,
    SCHEDULER_LOGS,
    SCHEDULER_SELECTORS,
    Settings,
)

Obj = dict[str, Any]

HAMI_RESOURCES = (
    ann.RESOURCE_GPU,
    ann.RESOURCE_GPUMEM,
    ann.RESOURCE_GPUMEM_PERCENTAGE,
    ann.RESOURCE_GPUCORES,
)
# HAMi rejects gpumem above MaxInt32 (docs/design/scheduler-filter.md §3.2; memoryFactor 1)
MAX_INT32 = 2**31 - 1
FIX_ADD_RESOURCES = (
    "add nvidia.com/gpu (and nvidia.com/gpumem / gpucores) to the container resources"
)


@dataclass
class PodCluster:
    """Everything the pod tree reads, fetched once."""

    pod: Obj
    events: list[Obj] = field(default_factory=list)
    scheduler_pods: list[Obj] | None = None  # None: they could not be listed
    lease: Obj | None = None
    lease_ref: str = ""  # "ns/name" when --scheduler-lease was given
    nodes: dict[str, Obj] = field(default_factory=dict)
    owner_exists: dict[str, bool] = field(default_factory=dict)  # "ns/name" of lock owners
    decision: Obj | None = None  # the scheduler's decision record, when it could be read
    decision_source: str = ""  # where it came from, or why it could not be read


def _resource(container: Obj, name: str) -> str | None:
    """HAMi reads limits first, then requests (docs/design/scheduler-filter.md §3.2)."""
    res = container.get("resources") or {}
    for part in ("limits", "requests"):
        value = (res.get(part) or {}).get(name)
        if value is not None:
            return str(value)
    return None


def _as_int(text: str) -> int | None:
    try:
        value = parse_quantity(text)
    except CodecError:
        return None
    return int(value) if value == value.to_integral_value() else None


def check_requests(pod: Obj) -> list[Finding]:
    spec = pod.get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    lines: list[str] = []
    consumers = 0
    problems: list[str] = []
    partial = False
    for c in containers:
        found = {r: v for r in HAMI_RESOURCES if (v := _resource(c, r)) is not None}
        if not found:
            continue
        lines.append(f"container {c.get('name', '?')}: " + ", ".join(f"{k}={v}" for k, v in found.items()))
        count = _as_int(found.get(ann.RESOURCE_GPU, "0") or "0")
        if not count:
            partial = True
            continue
        mem = found.get(ann.RESOURCE_GPUMEM)
        mem_value = _as_int(mem) if mem is not None else 0
        if mem_value is None or not 0 <= mem_value <= MAX_INT32:
            problems.append(
                f"container {c.get('name', '?')}: {ann.RESOURCE_GPUMEM}={mem} is not a whole number of MiB "
                "(0 to 2147483647)"
            )
            continue
        consumers += 1
    if problems:
        return [
            Finding(
                BROKEN,
                "pod.resources.invalid",
                "HAMi treats a container whose nvidia.com/gpumem is not an int32 of MiB "
                "as asking for nothing",
                tuple(lines + problems),
                "write nvidia.com/gpumem in MiB as an integer, e.g. 8192 (not 8Gi)",
            )
        ]
    if consumers:
        return [Finding(OK, "pod.resources.ok", "the pod requests HAMi resources", tuple(lines))]
    if partial:
        return [
            Finding(
                BROKEN,
                "pod.resources.no-gpu-count",
                "the pod asks for GPU memory/cores but no nvidia.com/gpu: HAMi's webhook normally adds "
                "nvidia.com/gpu: 1 and did not run for this pod",
                tuple(lines),
                "add nvidia.com/gpu to the container limits, and check the HAMi mutating webhook",
            )
        ]
    return [
        Finding(
            BROKEN,
            "pod.resources.none",
            "the pod requests no HAMi-managed resource",
            ("no container has nvidia.com/gpu, gpumem, gpumem-percentage or gpucores",),
            FIX_ADD_RESOURCES,
        )
    ]


def check_scheduler_name(pod: Obj, s: Settings) -> list[Finding]:
    name = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
    if name == s.scheduler_name:
        return [Finding(OK, "pod.scheduler-name.ok", f"schedulerName is {name}")]
    return [
        Finding(
            BROKEN,
            "pod.scheduler-name.wrong",
            f"schedulerName is {name}, not {s.scheduler_name}: HAMi never sees this pod",
            (f"spec.schedulerName: {name}", f"expected (--scheduler-name): {s.scheduler_name}"),
            f"set spec.schedulerName: {s.scheduler_name} (HAMi's webhook sets it for pods with HAMi "
            "resources: check that it is installed)",
        )
    ]


def _pod_state(p: Obj) -> tuple[bool, str]:
    status = p.get("status") or {}
    phase = status.get("phase", "Unknown")
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    restarts = sum(int(cs.get("restartCount", 0)) for cs in status.get("containerStatuses") or [])
    waiting = [
        str(w["reason"])
        for cs in status.get("containerStatuses") or []
        if (w := (cs.get("state") or {}).get("waiting")) and w.get("reason")
    ]
    role = labels_of(p).get(ann.SCHEDULER_ROLE_LABEL, "")
    text = (
        f"{namespace_of(p)}/{name_of(p)}: phase {phase}, ready {str(ready).lower()}, "
        f"restarts {restarts}"
        + (f", waiting {','.join(waiting)}" if waiting else "")
        + (f", role {role}" if role else "")
    )
    return phase == "Running" and ready, text


def _flag(args: list[str], name: str) -> str | None:
    """The value of ``--name=value`` or ``--name value`` in an argument list (the last one wins)."""
    value = None
    for i, arg in enumerate(args):
        if arg.startswith(f"{name}="):
            value = arg.split("=", 1)[1]
        elif arg == name:
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else "true"
    return value


def lease_of(scheduler_pods: list[Obj]) -> str:
    """``ns/name`` of the Lease the extenders follow, read from their ``--leader-elect*`` flags;
    "" when they do not elect (or no pod says)."""
    for p in scheduler_pods:
        for c in (p.get("spec") or {}).get("containers") or []:
            args = [str(a) for a in [*(c.get("command") or []), *(c.get("args") or [])]]
            if (_flag(args, "--leader-elect") or "false").lower() not in ("true", "1", "t"):
                continue
            name = _flag(args, "--leader-elect-resource-name")
            namespace = _flag(args, "--leader-elect-resource-namespace")
            if name and namespace:
                return f"{namespace}/{name}"
    return ""


def check_scheduler(c: PodCluster, s: Settings, now: datetime) -> list[Finding]:
    """Observable from the API: the scheduler's pods (phase, readiness, restarts, role label) and,
    when named (or named by the extenders' own flags), the kube-scheduler Lease the extender
    follows. The extender's HTTP port is reached over 127.0.0.1 by its sidecar, so
    Services/Endpoints would prove nothing."""
    if c.scheduler_pods is None:
        return [
            Finding(
                WARNING,
                "scheduler.unknown",
                "could not list the scheduler pods (no permission?)",
                (),
                f"check with: {GET_SCHEDULER}",
            )
        ]
    if not c.scheduler_pods:
        return [
            Finding(
                BROKEN,
                "scheduler.missing",
                "no HAMi scheduler pod found",
                tuple(f"no pod with label {sel}" for sel in SCHEDULER_SELECTORS),
                f"install or restart the HAMi scheduler: {RESTART_SCHEDULER}",
            )
        ]
    states = [_pod_state(p) for p in c.scheduler_pods]
    evidence = tuple(text for _, text in states)
    if not any(ok for ok, _ in states):
        return [
            Finding(
                BROKEN,
                "scheduler.not-running",
                "the HAMi scheduler is not running and ready",
                evidence,
                f"read its logs ({SCHEDULER_LOGS}), then {RESTART_SCHEDULER}",
            )
        ]
    out = [Finding(OK, "scheduler.running", "the HAMi scheduler is running", evidence)]
    roles = [labels_of(p).get(ann.SCHEDULER_ROLE_LABEL) for p in c.scheduler_pods]
    if any(roles) and "leader" not in roles:
        out.append(
            Finding(
                WARNING,
                "scheduler.no-leader",
                "no scheduler pod is labelled leader: the extender registers nodes only while it is leader",
                evidence,
                "check the kube-scheduler leader election and --leader-elect-resource-name",
            )
        )
    if c.lease_ref:
        out += _check_lease(c, now)
    return out


def _check_lease(c: PodCluster, now: datetime) -> list[Finding]:
    if c.lease is None:
        return [
            Finding(
                WARNING,
                "scheduler.lease.missing",
                f"lease {c.lease_ref} not found",
                (),
                "check --leader-elect-resource-name/-namespace of the scheduler",
            )
        ]
    spec = c.lease.get("spec") or {}
    holder, renew = spec.get("holderIdentity", ""), spec.get("renewTime")
    duration = int(spec.get("leaseDurationSeconds") or 0)
    if not renew:
        return [
            Finding(
                WARNING,
                "scheduler.lease.stale",
                f"lease {c.lease_ref} was never renewed",
                (f"holder {holder or '<none>'}",),
                "check the kube-scheduler sidecar",
            )
        ]
    renewed = parse_rfc3339(str(renew).replace(" ", "T"), "renewTime")
    held = now - renewed
    evidence = (f"holder {holder or '<none>'}, renewed {age(renewed, now)} ago, duration {duration}s",)
    if held.total_seconds() > duration:
        return [
            Finding(
                WARNING,
                "scheduler.lease.stale",
                f"lease {c.lease_ref} is expired: the extender is not leader and Filter waits",
                evidence,
                "check the kube-scheduler sidecar's logs",
            )
        ]
    return [Finding(OK, "scheduler.lease.ok", f"lease {c.lease_ref} is held", evidence)]
