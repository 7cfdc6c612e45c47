"""Bind (§5.3): node lock, then the Binding subresource; the lock is released on failure.

HAMi patches ``bind-phase``/``bind-time`` onto the pod and then posts the Binding. Here the
Binding carries them, with the allocation annotations the filter chose (``state.Assignment``):
the API server copies a Binding's annotations onto the pod in the same write that sets
``spec.nodeName``. A pod costs one node-lock patch, one Binding and two events. A device pod whose
assignment is gone (this replica restarted, or another one filtered it) is refused before the
lock, so kube-scheduler filters it again. ``hami_scheduler_bind_phase_duration_seconds`` has the
phases ``node_lock`` and ``bind`` (the Binding with the annotations).

With tracing on, the bind is a span in the pod's trace, with HAMi's phase spans
(``hami.scheduler.bind.pod_lookup``, ``.node_lookup``, ``.node_lock``, ``.apiserver_bind``); HAMi's
``.patch_annotations`` has no span here, because no patch is made: the annotations ride in the
Binding (docs/design/tracing.md). Among them, the pod's trace context re-signed bound to its UID,
the only form Allocate and the monitor join.

On success the lock stays held: the device plugin releases it after Allocate (or it expires).
Only the leader binds (§6.5); a follower answers with an error and writes nothing.

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from hami.core import annotations as ann
from hami.core import klog, tracing
from hami.core.codec.errors import CodecError
from hami.core.codec.nodelock import CONTENTION, parse_rfc3339
from hami.core.duration import format_duration
from hami.core.kube import errors, raw
from hami.core.kube.events import ObjectRef
from hami.core.kube.patches import patch_pod_metadata
from hami.core.objects import labels_of, meta_field
from hami.scheduler.engine.requests import pod_request
from hami.scheduler.extender.decisions import Recorder
from hami.scheduler.extender.events import PodEvents
from hami.scheduler.extender.nodelock import NodeLocker, NodeLockError
from hami.scheduler.extender.state import Assignment, ClusterState

log = klog.get_logger(__name__)

NOT_LEADER = "this hami-scheduler replica is not the leader; binding is left to the leader"


PHASE: Final = "hami.scheduler.bind."  # HAMi's span names (its tracing design)


@dataclass
class _Trace:
    """One bind's span: started once the pod is known, at the bind's start (0 when tracing is off)."""

    start_ns: int
    span: Any = None

    def begin(self, pod: Mapping[str, Any], admit: tracing.Admit | None = None) -> None:
        self.span = tracing.pod_span("hami.scheduler.bind", pod, self.start_ns, admit=admit)

    def phase(self, name: str, start_ns: int, attributes: Mapping[str, Any] | None = None) -> None:
        if self.span is not None:
            tracing.phase(self.span, PHASE + name, start_ns, tracing.now_ns(), attributes)


@dataclass(frozen=True)
class BindArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def _pod_group(pod: Mapping[str, Any]) -> bool:
    """PodGroup member (docs/design/scheduler-annotations.md §2.1): the pod-group label or
    ``spec.schedulingGroup.podGroupName``."""
    labels = labels_of(pod)
    group = (pod.get("spec") or {}).get("schedulingGroup") or {}
    return bool(labels.get(ann.POD_GROUP_LABEL)) or (
        isinstance(group, Mapping) and bool(group.get("podGroupName"))
    )


def unassigned_message(args: BindArgs, assignment: Assignment | None) -> str:
    """Why a device pod cannot be bound to ``args.node``; kube-scheduler retries the pod."""
    where = f"pod {args.pod_namespace}/{args.pod_name}"
    if assignment is not None:
        return (
            f"{where} was filtered onto node {assignment.node}, not {args.node}; "
            "the scheduler will filter it again"
        )
    return (
        f"{where} has no device reservation on node {args.node} in this hami-scheduler "
        "(it restarted, or another replica filtered the pod); the scheduler will filter it again"
    )


class Binder:
    def __init__(
        self,
        state: ClusterState,
        api_client: Any,
        locker: NodeLocker,
        events: PodEvents,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        lock_retry_timeout: float = 28.0,
        recorder: Recorder | None = None,
        label_pods: bool = False,
    ) -> None:
        self.state = state
        self.api = api_client
        self.locker = locker
        self.events = events
        self.is_leader = is_leader
        self.lock_retry_timeout = lock_retry_timeout
        self.metrics = state.metrics
        self.recorder = recorder
        self.label_pods = label_pods

    def bind(self, args: BindArgs) -> str:
        """Bind the pod; returns the ExtenderBindingResult ``Error`` ("" on success)."""
        started = time.monotonic()
        trace = _Trace(tracing.now_ns())
        result = "error"
        error = ""
        try:
            if not self.is_leader():
                result = "not_leader"
                return NOT_LEADER
            error = self._bind(args, trace)
            result = "success" if not error else "error"
            return error
        finally:
            self.metrics.bind_duration.labels(result).observe(
                time.monotonic() - started, tracing.exemplar(trace.span)
            )
            if trace.span is not None:
                tracing.end(trace.span, error, {"hami.bind.result": result, "k8s.node.name": args.node})

    def _get_pod(self, args: BindArgs) -> dict[str, Any]:
        pod = self.state.get_pod(args.pod_namespace, args.pod_name)
        if pod is not None:
            return pod
        # The watch may lag the pod's creation by a moment; ask the API server once.
        found: dict[str, Any] = raw.request_json(
            self.api, "GET", raw.resource_path("", "v1", "pods", args.pod_namespace, args.pod_name)
        )
        return found

    def _bind(self, args: BindArgs, trace: _Trace) -> str:
        log.v(5).info("bind %s/%s (uid %s) to %s", args.pod_namespace, args.pod_name, args.pod_uid, args.node)
        try:
            pod = self._get_pod(args)
        except errors.ApiError as err:
            if trace.start_ns:  # a trace of its own: no pod, no context
                trace.begin({"metadata": {"namespace": args.pod_namespace, "name": args.pod_name}})
                trace.phase("pod_lookup", trace.start_ns)
            self._drop_stale(args.pod_uid)
            log.error("bind %s/%s: pod not found: %s", args.pod_namespace, args.pod_name, err)
            return str(err)
        if trace.start_ns:
            trace.begin(pod, self.state.traces.admit)
            trace.phase("pod_lookup", trace.start_ns)
        phase = tracing.now_ns()
        node = self.state.get_node(args.node)
        trace.phase("node_lookup", phase)
        ref = ObjectRef.from_object(pod, kind="Pod")
        if node is None:
            self.events.binding_failed(ref, f"failed to get node {args.node}")
            self._drop_stale(args.pod_uid)
            return f'node "{args.node}" not found'
        locked = False
        request = pod_request(pod, self.state.nvidia)
        annotations: dict[str, str] = {}
        if request is not None:
            with self.state.lock:
                assignment = self.state.assignments.get(request.uid)
            if assignment is None or assignment.node != args.node:
                message = unassigned_message(args, assignment)
                log.error("bind %s/%s: %s", args.pod_namespace, args.pod_name, message)
                self.events.binding_failed(ref, message)
                return message
            annotations.update(assignment.annotations)
        annotations[ann.POD_BIND_PHASE] = ann.BIND_PHASE_ALLOCATING
        annotations[ann.POD_BIND_TIME] = str(int(time.time()))
        if trace.start_ns:  # the context bound to the pod's UID: what Allocate and the monitor accept
            annotations.update(tracing.bound_annotation(pod, self.state.traces.admit))
        gpus = request is not None  # the decision record follows HAMi pods only
        try:
            if request is not None and request.locks_node:
                phase = tracing.now_ns()
                try:
                    self._lock(args, pod)
                finally:
                    trace.phase("node_lock", phase)
                locked = True
            phase = tracing.now_ns()
            started = time.monotonic()
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {
                    "name": args.pod_name,
                    "namespace": args.pod_namespace,
                    "uid": args.pod_uid,
                    "annotations": annotations,
                },
                "target": {"apiVersion": "v1", "kind": "Node", "name": args.node},
            }
            raw.call(
                self.api,
                "POST",
                raw.resource_path("", "v1", "pods", args.pod_namespace, args.pod_name) + "/binding",
                body=binding,
            )
            self.metrics.bind_phase_duration.labels("bind").observe(time.monotonic() - started)
            trace.phase("apiserver_bind", phase, {"hami.bind.annotations": len(annotations)})
        except (NodeLockError, errors.ApiError) as err:
            if isinstance(err, errors.ApiError):
                self.metrics.api_errors.labels("bind", errors.error_reason(err)).inc()
            if locked:
                self._release(args)
            if gpus:
                failed = "node_lock" if isinstance(err, NodeLockError) else "bind"
                self.metrics.bind_rollbacks.labels(failed).inc()
            message = str(err)
            log.error("bind %s/%s to %s failed: %s", args.pod_namespace, args.pod_name, args.node, message)
            self.events.binding_failed(ref, message)
            if self.recorder is not None and gpus:
                contention = isinstance(err, NodeLockError) and err.contention
                self.recorder.bind_failed(args.pod_namespace, args.pod_name, args.node, message, contention)
            return message
        if request is not None:
            with self.state.lock:  # the pod's own annotations account for it from now on
                self.state.assignments.pop(request.uid, None)
        self.events.binding_succeed(ref, args.node)
        if gpus:
            self._bound(args, pod, trace)
            if self.label_pods:
                self._label(args)
        log.v(4).info("bound %s/%s to %s", args.pod_namespace, args.pod_name, args.node)
        return ""

    def _drop_stale(self, uid: str) -> None:
        if self.state.drop_reservation(uid):
            self.metrics.stale_reservations.labels(ann.VENDOR_NVIDIA).inc()

    def _bound(self, args: BindArgs, pod: Mapping[str, Any], trace: _Trace) -> None:
        if self.recorder is not None:
            self.recorder.bound(args.pod_namespace, args.pod_name, args.node)
        created = meta_field(pod, "creationTimestamp")
        try:
            since = time.time() - parse_rfc3339(created).timestamp()
        except CodecError:
            return  # no creation time to measure from
        self.metrics.pod_creation_to_bind.observe(max(since, 0.0), tracing.exemplar(trace.span))

    def _label(self, args: BindArgs) -> None:
        """``hami.io/vgpu-node`` on the bound pod: HAMi's filter patch sets it and a Binding cannot.
        A failure is logged and counted; the pod stays bound."""
        try:
            patch_pod_metadata(
                self.api, args.pod_namespace, args.pod_name, labels={ann.POD_VGPU_NODE: args.node}
            )
        except errors.ApiError as err:
            self.metrics.api_errors.labels("pod_label", errors.error_reason(err)).inc()
            log.warning("bind %s/%s: failed to label the pod %s: %s", args.pod_namespace, args.pod_name,
                        ann.POD_VGPU_NODE, err)

    def _lock(self, args: BindArgs, pod: Mapping[str, Any]) -> None:
        started = time.monotonic()
        retry = _pod_group(pod) and self.lock_retry_timeout > 0
        deadline = started + self.lock_retry_timeout
        try:
            while True:
                try:
                    self.locker.lock_node(
                        args.node, args.pod_namespace, args.pod_name, cached=self.state.get_node(args.node)
                    )
                    return
                except NodeLockError as err:
                    if not (retry and err.contention):
                        raise
                    if time.monotonic() >= deadline:
                        raise NodeLockError(
                            f"timed out after {format_duration(self.lock_retry_timeout)} waiting for node "
                            f"{args.node} to be unlocked: {CONTENTION}",
                            contention=True,
                        ) from err
                    log.v(4).info("bind %s/%s: %s; retrying", args.pod_namespace, args.pod_name, err)
                    time.sleep(0.1)
        finally:
            waited = time.monotonic() - started
            self.metrics.node_lock_wait.observe(waited)
            self.metrics.bind_phase_duration.labels("node_lock").observe(waited)

    def _release(self, args: BindArgs) -> None:
        try:
            self.locker.release_node_lock(args.node, args.pod_namespace, args.pod_name)
        except NodeLockError as err:
            log.warning(
                "node %s: failed to release the lock of %s/%s: %s (it expires after %s)",
                args.node,
                args.pod_namespace,
                args.pod_name,
                err,
                format_duration(self.locker.timeout),
            )
