"""The pod-pending decision trees of docs/guides/scheduler-debugging.md and
docs/guides/device-plugin-debugging.md (§6).

Order: resources → schedulerName → scheduler running → (bound? bind phase) → HAMi events →
FilteringFailed reason codes → node registration / handshake for unfit nodes → BindingFailed /
node lock. The walk stops at the first step with a broken finding; the steps before it are the
path, reported as evidence that they were checked.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from hami.core import annotations as ann
from hami.core import reasons
from hami.core.codec import CodecError
from hami.core.codec.nodelock import parse_rfc3339
from hami.core.duration import format_duration
from hami.core.objects import annotations_of, meta_field, name_of, namespace_of
from hami.doctor import nodecheck, nodeprotocol, verdict
from hami.doctor.findings import BROKEN, OK, WARNING, Finding, Section, is_broken
from hami.doctor.podinputs import PodCluster, check_requests, check_scheduler, check_scheduler_name
from hami.doctor.settings import Settings

Obj = dict[str, Any]

HAMI_REASONS = ("FilteringFailed", "FilteringSucceed", "BindingFailed", "BindingSucceed")
_NODE_IN_MESSAGE = re.compile(r"node \[?([\w.-]+)\]?")
FIX_RAISE_V5 = "raise the scheduler log level to V(5) and read its log for this pod"
FIX_RAISE_V4 = "raise the scheduler log level to V(4) and check the Filter lines (hami-doctor logs)"


def _when(event: Obj) -> datetime | None:
    for stamp in (
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        meta_field(event, "creationTimestamp"),
    ):
        if stamp:
            try:
                return parse_rfc3339(str(stamp))
            except CodecError:
                continue
    return None


def _describe(event: Obj, now: datetime) -> str:
    when = _when(event)
    ago = f", {nodeprotocol.age(when, now)} ago" if when else ""
    source = (event.get("source") or {}).get("component") or event.get("reportingComponent") or "?"
    count = int(event.get("count") or 1)
    return (
        f"{event.get('type', '?')} {event.get('reason', '?')} (x{count}{ago}) from {source}: "
        f"{event.get('message', '')}"
    )


def diagnose_pod(c: PodCluster, s: Settings, now: datetime) -> Section:
    """Requests → schedulerName → bound? (then it is scheduled) → the scheduler's decision record,
    else its pods and the pod's events, walked as the guides' tree."""
    section = Section(f"pod {namespace_of(c.pod)}/{name_of(c.pod)}")
    section.findings += check_requests(c.pod)
    if not is_broken(section.findings):
        section.findings += check_scheduler_name(c.pod, s)
    if is_broken(section.findings):
        return section
    spec, annos = c.pod.get("spec") or {}, annotations_of(c.pod)
    if spec.get("nodeName") or ann.POD_BIND_PHASE in annos:
        section.findings += _bind_phase(c, s, now)
        return section
    if c.decision is not None:
        section.findings += verdict.findings(c.decision, c.decision_source)
        return section
    found = check_scheduler(c, s, now)
    hami_events = [e for e in c.events if e.get("reason") in HAMI_REASONS]
    if found and found[0].code == "scheduler.missing" and hami_events:
        # the scheduler's own events prove it runs, under labels the doctor does not know
        found = [
            Finding(
                WARNING,
                "scheduler.unlabelled",
                "no HAMi scheduler pod found by label, but it recorded events for this pod",
                found[0].evidence,
                "pass --scheduler-url (its metrics address) to read its decision record",
            )
        ]
    if c.decision_source:
        found.append(Finding(OK, "scheduler.decision.none", "no decision record", (c.decision_source,)))
    section.findings += found
    if is_broken(section.findings):
        return section
    section.findings += _after_scheduling(c, s, now)
    return section


def _after_scheduling(c: PodCluster, s: Settings, now: datetime) -> list[Finding]:
    spec, annos = c.pod.get("spec") or {}, annotations_of(c.pod)
    if spec.get("nodeName") or ann.POD_BIND_PHASE in annos:
        return _bind_phase(c, s, now)
    events = sorted(
        (e for e in c.events if e.get("reason") in HAMI_REASONS),
        key=lambda e: _when(e) or datetime.min.replace(tzinfo=now.tzinfo),
    )
    if not events:
        return _no_hami_events(c)
    latest = events[-1]
    reason = latest.get("reason")
    if reason == "FilteringFailed":
        return _filtering_failed([e for e in events if e.get("reason") == "FilteringFailed"], c, s, now)
    if reason == "BindingFailed":
        return _binding_failed(latest, c, s, now)
    return [
        Finding(
            WARNING,
            "pod.pending-after-filter",
            "filtering succeeded but the pod is still Pending: another scheduler plugin may hold it",
            (_describe(latest, now),),
            "check the complete kube-scheduler log for this pod",
        )
    ]


def _no_hami_events(c: PodCluster) -> list[Finding]:
    insufficient = [e for e in c.events if f"Insufficient {ann.RESOURCE_GPU}" in str(e.get("message", ""))]
    if not insufficient:
        return [
            Finding(
                WARNING,
                "pod.events.none",
                "the pod has no HAMi events",
                ("no FilteringFailed/FilteringSucceed/BindingFailed/BindingSucceed event",),
                FIX_RAISE_V5,
            )
        ]
    with_gpu = {n: g for n, node in sorted(c.nodes.items()) if (g := nodeprotocol.allocatable_gpus(node)) > 0}
    evidence = (
        str(insufficient[-1].get("message", "")),
        *(f"{n}: allocatable {ann.RESOURCE_GPU} {g}" for n, g in with_gpu.items()),
    )
    if not with_gpu:
        return [
            Finding(
                BROKEN,
                "pod.insufficient.no-allocatable",
                f"Insufficient {ann.RESOURCE_GPU}: no node has allocatable {ann.RESOURCE_GPU}",
                evidence,
                "the device plugin has not registered devices with kubelet "
                "(hami-doctor nodes): check its pod and logs",
            )
        ]
    return [
        Finding(
            BROKEN,
            "pod.insufficient.all-used",
            f"Insufficient {ann.RESOURCE_GPU}: the existing pods use every device slot",
            evidence,
            "wait for resources to be released or increase deviceSplitCount (hami-tune)",
        )
    ]


def _filtering_failed(events: list[Obj], c: PodCluster, s: Settings, now: datetime) -> list[Finding]:
    parsed = reasons.parse_filter_messages([str(e.get("message", "")) for e in events])
    described = tuple(_describe(e, now) for e in events)
    out: list[Finding] = []
    for reason, nodes in sorted(parsed.by_reason.items()):
        meaning, fix = reasons.explain(reason)
        on = f" on {', '.join(nodes)}" if nodes else ""
        out.append(
            Finding(
                BROKEN, f"pod.filter.{reason.replace(' ', '-')}", f"{reason}{on}: {meaning}", described, fix
            )
        )
    for text in parsed.other:
        out.append(Finding(BROKEN, "pod.filter.error", f"filter failed: {text}", described, FIX_RAISE_V4))
    unregistered = {reasons.NODE_UNFIT_POD, reasons.NODE_UNREGISTERED} & parsed.by_reason.keys()
    if unregistered or not parsed.by_reason:
        named = sorted({n for r in unregistered for n in parsed.by_reason[r]})
        out += _node_annotations(named or sorted(c.nodes), c, s, now)
    if not out:
        out.append(Finding(BROKEN, "pod.filter.unexplained", "filtering failed", described, FIX_RAISE_V4))
    return out


def _node_annotations(names: list[str], c: PodCluster, s: Settings, now: datetime) -> list[Finding]:
    """The scheduler guide's NodeUnfitPod branch: register present? handshake expired? else raise -v."""
    out: list[Finding] = []
    for name in names:
        node = c.nodes.get(name)
        if node is None:
            out.append(
                Finding(
                    BROKEN,
                    "node.missing",
                    f"node {name} does not exist",
                    (),
                    "the event names a node that is gone; retry scheduling",
                )
            )
            continue
        found, _ = nodecheck.check_registration(node)
        found += nodeprotocol.check_node_handshake(node, s, now)
        out += [_on(name, f) for f in found if f.severity != OK]
    if not out:
        out.append(
            Finding(
                WARNING,
                "pod.filter.annotations-ok",
                "node registrations and handshakes look right",
                tuple(f"checked {n}" for n in names),
                FIX_RAISE_V4,
            )
        )
    return out


def _on(node: str, f: Finding) -> Finding:
    return Finding(f.severity, f.code, f"{node}: {f.summary}", f.evidence, f.fix, f.remedy)


def _binding_failed(event: Obj, c: PodCluster, s: Settings, now: datetime) -> list[Finding]:
    message = str(event.get("message", ""))
    m = _NODE_IN_MESSAGE.search(message)
    node_name = m.group(1) if m else annotations_of(c.pod).get(ann.POD_VGPU_NODE, "")
    described = (_describe(event, now),)
    if "node lock contention" in message and node_name in c.nodes:
        lock_findings = _lock_for_pod(node_name, c, s, now)
        head = Finding(
            BROKEN,
            "pod.bind.lock-contention",
            f"bind failed: node {node_name} is locked",
            described,
            "wait for the holder's allocation to finish; a lock older than the "
            f"--node-lock-timeout ({format_duration(s.node_lock_timeout)}) is taken over",
        )
        return [head, *lock_findings]
    return [
        Finding(
            BROKEN,
            "pod.bind.failed",
            f"bind failed: {message}",
            described,
            "check the scheduler's connection to the API server (etcd) and its permission to patch "
            "node annotations and bind pods",
        )
    ]


def _lock_for_pod(node_name: str, c: PodCluster, s: Settings, now: datetime) -> list[Finding]:
    node = c.nodes[node_name]
    value = annotations_of(node).get(ann.NODE_LOCK)
    owner_ok = None
    if value is not None and value.count(",") == 2:
        owner_ok = c.owner_exists.get("/".join(value.split(",")[1:]))
    found, lock = nodeprotocol.check_node_lock(node, owner_ok, s, now)
    if (
        lock
        and lock.name
        and (lock.namespace, lock.name) != (namespace_of(c.pod), name_of(c.pod))
        and found[0].code == "node.lock.held"
    ):
        found = [
            Finding(
                WARNING,
                "node.lock.other",
                f"node lock held by {lock.namespace}/{lock.name} for "
                f"{nodeprotocol.age(lock.time, now)}: binds of other pods to {node_name} wait",
                found[0].evidence,
                "wait for that pod's allocation to finish; it expires after "
                f"{format_duration(s.node_lock_timeout)}",
            )
        ]
    return [_on(node_name, f) for f in found]


def _bind_phase(c: PodCluster, s: Settings, now: datetime) -> list[Finding]:
    spec, annos = c.pod.get("spec") or {}, annotations_of(c.pod)
    node = spec.get("nodeName") or annos.get(ann.POD_VGPU_NODE, "")
    phase = annos.get(ann.POD_BIND_PHASE, "")
    status = (c.pod.get("status") or {}).get("phase", "Unknown")
    evidence = [
        f"{ann.POD_BIND_PHASE}: {phase or '<absent>'}",
        f"node: {node or '<none>'}",
        f"pod phase: {status}",
    ]
    bind_time = annos.get(ann.POD_BIND_TIME, "")
    bound = datetime.fromtimestamp(int(bind_time), now.tzinfo) if bind_time.isdigit() else None
    if bound is not None:
        evidence.append(f"{ann.POD_BIND_TIME}: {bind_time} ({nodeprotocol.age(bound, now)} ago)")
    locks = _lock_for_pod(node, c, s, now) if node in c.nodes else []
    if phase == ann.BIND_PHASE_FAILED:
        return [
            Finding(
                BROKEN,
                "pod.bind-phase.failed",
                f"the device plugin failed to allocate devices on {node}",
                tuple(evidence),
                "read the Allocate error in the pod's events and the device plugin log "
                "(hami-doctor logs), fix it, then delete the pod so it is scheduled again",
            ),
            *[f for f in locks if f.severity != OK],
        ]
    if phase == ann.BIND_PHASE_ALLOCATING:
        if bound is not None and now - bound > s.bind_timeout:
            return [
                Finding(
                    BROKEN,
                    "pod.bind-phase.stuck",
                    f"stuck in allocating for {nodeprotocol.age(bound, now)} (> "
                    f"{format_duration(s.bind_timeout)}): the device plugin never finished Allocate",
                    tuple(evidence),
                    f"check the device plugin pod on {node} and kubelet's device "
                    "plugin log (journalctl -u kubelet | grep -i device)",
                ),
                *locks,
            ]
        return [
            Finding(OK, "pod.bind-phase.allocating", f"allocation in progress on {node}", tuple(evidence)),
            *locks,
        ]
    if phase == ann.BIND_PHASE_SUCCESS:
        return [
            Finding(
                OK,
                "pod.bind-phase.success",
                f"devices allocated on {node}; pod phase {status}",
                tuple(evidence),
            )
        ]
    return [Finding(OK, "pod.bound", f"pod bound to {node}; pod phase {status}", tuple(evidence))]
