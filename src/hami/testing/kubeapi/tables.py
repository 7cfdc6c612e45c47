"""Server-side ``Table`` output (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``), which
`kubectl get` asks for: the API server's columns for the types the emulator serves (pods, nodes,
deployments, daemonsets, services, ...), and its default (Name, Created At) for the others.

Pure: objects in, a Table document out. Ages are the API server's short human durations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from hami.testing.kubeapi.resources import ResourceType

Obj = dict[str, Any]
Row = list[Any]
# (name, type, priority): priority 1 columns show with `-o wide` only.
Column = tuple[str, str, int]


def wants_table(accept: str) -> bool:
    return any("as=Table" in part for part in accept.split(","))


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery's HumanDuration: 45s, 5m10s, 3h4m, 2d5h, 120d, 3y45d."""
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years = hours // (24 * 365)
        days = (hours // 24) % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // (24 * 365)}y"


def _age(obj: Obj, now: datetime) -> str:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return "<unknown>"
    created = datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return human_duration((now - created).total_seconds())


def _none(value: Any) -> str:
    return "<none>" if value in (None, "", [], {}) else str(value)


def _selector(labels: dict[str, str] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or "<none>"


def _pod(p: Obj) -> Row:
    spec, status = p.get("spec") or {}, p.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for cs in statuses if cs.get("ready"))
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for cs in statuses:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            reason = waiting["reason"]
    if (p.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    restarts = sum(int(cs.get("restartCount", 0)) for cs in statuses)
    gates = spec.get("readinessGates") or []
    return [
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        restarts,
        None,  # the age column, filled by the caller
        _none(status.get("podIP")),
        _none(spec.get("nodeName")),
        _none(status.get("nominatedNodeName")),
        f"{len(gates)}/{len(gates)}" if gates else "<none>",
    ]


def _node(n: Obj) -> Row:
    status = n.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = "Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")
    if (n.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = (n.get("metadata") or {}).get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    info = status.get("nodeInfo") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    return [
        state,
        ",".join(roles) or "<none>",
        None,
        info.get("kubeletVersion", ""),
        _none(addresses.get("InternalIP")),
        _none(addresses.get("ExternalIP")),
        info.get("osImage", ""),
        info.get("kernelVersion", ""),
        info.get("containerRuntimeVersion", ""),
    ]


def _containers(template_spec: Obj) -> tuple[str, str]:
    containers = template_spec.get("containers") or []
    return ",".join(str(c.get("name")) for c in containers), ",".join(str(c.get("image")) for c in containers)


def _deployment(d: Obj) -> Row:
    spec, status = d.get("spec") or {}, d.get("status") or {}
    names, images = _containers(((spec.get("template") or {}).get("spec")) or {})
    return [
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
        None,
        names,
        images,
        _selector((spec.get("selector") or {}).get("matchLabels")),
    ]


def _daemonset(d: Obj) -> Row:
    spec, status = d.get("spec") or {}, d.get("status") or {}
    template = ((spec.get("template") or {}).get("spec")) or {}
    names, images = _containers(template)
    return [
        status.get("desiredNumberScheduled", 0),
        status.get("currentNumberScheduled", 0),
        status.get("numberReady", 0),
        status.get("updatedNumberScheduled", 0),
        status.get("numberAvailable", 0),
        _selector(template.get("nodeSelector")),
        None,
        names,
        images,
        _selector((spec.get("selector") or {}).get("matchLabels")),
    ]


def _service(s: Obj) -> Row:
    spec = s.get("spec") or {}
    ports = ",".join(
        f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/{p.get('protocol', 'TCP')}"
        for p in spec.get("ports") or []
    )
    return [
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP", "<none>"),
        ",".join(spec.get("externalIPs") or []) or "<none>",
        ports or "<none>",
        None,
        _selector(spec.get("selector")),
    ]


def _event(e: Obj) -> Row:
    involved = e.get("involvedObject") or e.get("regarding") or {}
    return [
        None,
        e.get("type", ""),
        e.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        e.get("message") or e.get("note") or "",
    ]


_AGE: Column = ("Age", "string", 0)
# type key -> (columns after Name, row builder); a None cell in a row is the age.
PRINTERS: dict[str, tuple[list[Column], Callable[[Obj], Row]]] = {
    "pods": (
        [
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            _AGE,
            ("IP", "string", 1),
            ("Node", "string", 1),
            ("Nominated Node", "string", 1),
            ("Readiness Gates", "string", 1),
        ],
        _pod,
    ),
    "nodes": (
        [
            ("Status", "string", 0),
            ("Roles", "string", 0),
            _AGE,
            ("Version", "string", 0),
            ("Internal-IP", "string", 1),
            ("External-IP", "string", 1),
            ("OS-Image", "string", 1),
            ("Kernel-Version", "string", 1),
            ("Container-Runtime", "string", 1),
        ],
        _node,
    ),
    "deployments.apps": (
        [
            ("Ready", "string", 0),
            ("Up-to-date", "integer", 0),
            ("Available", "integer", 0),
            _AGE,
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1),
        ],
        _deployment,
    ),
    "daemonsets.apps": (
        [
            ("Desired", "integer", 0),
            ("Current", "integer", 0),
            ("Ready", "integer", 0),
            ("Up-to-date", "integer", 0),
            ("Available", "integer", 0),
            ("Node Selector", "string", 0),
            _AGE,
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1),
        ],
        _daemonset,
    ),
    "services": (
        [
            ("Type", "string", 0),
            ("Cluster-IP", "string", 0),
            ("External-IP", "string", 0),
            ("Port(s)", "string", 0),
            _AGE,
            ("Selector", "string", 1),
        ],
        _service,
    ),
    "configmaps": (
        [("Data", "integer", 0), _AGE],
        lambda o: [len(o.get("data") or {}) + len(o.get("binaryData") or {}), None],
    ),
    "secrets": (
        [("Type", "string", 0), ("Data", "integer", 0), _AGE],
        lambda o: [o.get("type", "Opaque"), len(o.get("data") or {}), None],
    ),
    "serviceaccounts": ([("Secrets", "integer", 0), _AGE], lambda o: [len(o.get("secrets") or []), None]),
    "namespaces": (
        [("Status", "string", 0), _AGE],
        lambda o: [(o.get("status") or {}).get("phase", "Active"), None],
    ),
    "leases.coordination.k8s.io": (
        [("Holder", "string", 0), _AGE],
        lambda o: [(o.get("spec") or {}).get("holderIdentity", ""), None],
    ),
    "events": (
        [
            ("Last Seen", "string", 0),
            ("Type", "string", 0),
            ("Reason", "string", 0),
            ("Object", "string", 0),
            ("Message", "string", 0),
        ],
        _event,
    ),
}


def _default_cells(o: Obj) -> Row:
    return [(o.get("metadata") or {}).get("creationTimestamp", "")]


def _age_cell(_o: Obj) -> Row:
    return [None]


def _definition(name: str, type_: str, priority: int) -> Obj:
    column: Obj = {
        "name": name,
        "type": type_,
        "format": "name" if name == "Name" else "",
        "description": name,
        "priority": priority,
    }
    if name == "Created At":
        column["format"] = "date"
    return column


def _attached(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata") or {},
    }


def table(
    rtype: ResourceType,
    objects: Iterable[Obj],
    list_meta: Obj,
    include_object: str = "",
    now: datetime | None = None,
) -> Obj:
    """A meta.k8s.io/v1 Table of ``objects`` (``includeObject``: None, Metadata (default), Object)."""
    now = now or datetime.now(UTC)
    printer = PRINTERS.get(rtype.key)
    if printer is None:  # the API server's default: custom resources get Age, built-ins Created At
        custom = "." in rtype.group and not rtype.group.endswith(".k8s.io")
        columns: list[Column] = [("Age", "string", 0) if custom else ("Created At", "date", 0)]
        build: Callable[[Obj], Row] = _default_cells if not custom else _age_cell
    else:
        columns, build = printer
    rows = []
    for obj in objects:
        cells: Row = [(obj.get("metadata") or {}).get("name", ""), *build(obj)]
        cells = [_age(obj, now) if cell is None else cell for cell in cells]
        row: Obj = {"cells": cells}
        attached = _attached(obj, include_object or "Metadata")
        if attached is not None:
            row["object"] = attached
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {
            k: v for k, v in list_meta.items() if k in ("resourceVersion", "continue", "remainingItemCount")
        },
        "columnDefinitions": [_definition("Name", "string", 0), *(_definition(*c) for c in columns)],
        "rows": rows,
    }
