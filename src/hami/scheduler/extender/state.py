"""Cluster state from watches: nodes, pods (allocations), ResourceQuotas (§6.1, §6.3, §6.4).

One ``ClusterState`` owns the informers and the decoded caches. ``lock`` guards ``nodes`` (the
registered nodes the filter sees, kept by the register pass), ``usage``, ``quotas`` and
``assignments``; the filter runs ``filter_pod`` and ``commit`` under it. Pod events keep usage and
quota in step with the pods' ``hami.io/vgpu-devices-allocated`` annotations, as HAMi's pod manager
does.

Unlike HAMi, the filter does not patch the pod: what it chose (the allocation annotations) waits
in ``assignments`` beside the in-memory reservation, and /bind sends it in the Binding, whose
annotations the API server copies onto the pod together with ``spec.nodeName``. That saves one
write per pod, and the device plugin never sees a pod with half of its annotations. The cost: a
bind needs the replica that filtered the pod (kube-scheduler's sidecar extender is that one), and
a bind after a restart or a leadership change fails, so kube-scheduler filters the pod again.

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from hami.core import annotations as ann
from hami.core import klog, tracing
from hami.core.codec.errors import CodecError
from hami.core.codec.mig import decode_mig_allocations
from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.devices import MigAllocation
from hami.core.kube.informer import Informer
from hami.core.objects import annotations_of, metadata_of, name_of, namespace_of, uid_of
from hami.scheduler.engine.device_config import NvidiaConfig
from hami.scheduler.engine.mig import unreserved
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.requests import pod_request
from hami.scheduler.engine.usage import PodAllocation, UsageIndex, collapse_init_containers
from hami.scheduler.extender.metrics import SchedulerMetrics
from hami.scheduler.extender.traceowners import TraceOwners

log = klog.get_logger(__name__)

Obj = dict[str, Any]

# Node states (hami_scheduler_nodes{state}).
HEALTHY = "healthy"
HANDSHAKE_EXPIRED = "handshake_expired"
UNREGISTERED = "unregistered"
DECODE_ERROR = "decode_error"
NODE_STATES = (HEALTHY, HANDSHAKE_EXPIRED, UNREGISTERED, DECODE_ERROR)


@dataclass
class NodeRecord:
    """What the register pass knows about one node, registered or not."""

    state: str
    handshake: datetime | None = None  # time in the current handshake value, if it parses
    key: tuple[str | None, ...] = ()  # annotation texts ``node`` was decoded from
    node: NodeState | None = None
    error: str = ""
    reported_gpus: int = 0  # HAMi's ReportedGPUNum


class PendingPod(NamedTuple):
    """A Pending pod that requests HAMi resources, with what a scrape counts it by."""

    pod: Obj
    namespace: str
    node: str  # spec.nodeName: "" until the pod is bound


@dataclass(frozen=True)
class Assignment:
    """What /filter chose for a pod: the node and the annotations /bind carries in the Binding."""

    node: str
    annotations: Mapping[str, str]


UsageListener = Callable[[PodAllocation | None, PodAllocation | None], None]  # (old, new)


class ObservedUsage(UsageIndex):
    """The usage index, telling listeners of every reservation added, replaced or removed (under
    the state lock, like every change): the scrape's text for a pod and its node is redone when the
    change arrives, so a scrape after a burst only joins."""

    def __init__(self) -> None:
        super().__init__()
        self.listeners: list[UsageListener] = []

    def add(self, alloc: PodAllocation) -> bool:
        old = self.get(alloc.uid)
        new = super().add(alloc)
        for listener in self.listeners:
            listener(old, alloc)
        return new

    def remove(self, uid: str) -> PodAllocation | None:
        old = super().remove(uid)
        if old is not None:
            for listener in self.listeners:
                listener(old, None)
        return old


def _register_inputs(node: Obj) -> tuple[dict[str, str], object]:
    """What of a node the register pass reads: its annotations but the node lock, and
    ``status.allocatable``."""
    annotations = {k: v for k, v in annotations_of(node).items() if k != ann.NODE_LOCK}
    status = node.get("status")
    return annotations, status.get("allocatable") if isinstance(status, Mapping) else None


def _init_done(pod: Mapping[str, Any]) -> bool:
    """All init containers terminated with exit code 0 (and there was at least one)."""
    status = pod.get("status")
    statuses = status.get("initContainerStatuses") if isinstance(status, Mapping) else None
    if not isinstance(statuses, list) or not statuses:
        return False
    for s in statuses:
        term = ((s or {}).get("state") or {}).get("terminated") if isinstance(s, Mapping) else None
        if not isinstance(term, Mapping) or term.get("exitCode") != 0:
            return False
    return True


class ClusterState:
    def __init__(
        self,
        api_client: Any,
        nvidia: NvidiaConfig,
        metrics: SchedulerMetrics,
        *,
        node_label_selector: str | None = None,
    ) -> None:
        self.nvidia = nvidia
        self.metrics = metrics
        self.lock = threading.RLock()
        self.nodes: dict[str, NodeState] = {}
        self.records: dict[str, NodeRecord] = {}
        self.usage = ObservedUsage()
        self.quotas = QuotaManager(nvidia)
        self.assignments: dict[str, Assignment] = {}  # pod UID -> the filter's choice, until bound
        self.traces = TraceOwners()  # which pod may join a trace context (filter and bind)
        self.synced = threading.Event()
        self.wake = threading.Event()  # register work is waiting (see ``take_register_work``)
        self._work_lock = threading.Lock()
        self._dirty: set[str] = set()  # nodes added/changed/deleted since the last pass
        self._full = True  # a pass over every node is due (start, leadership gained)
        self._released: set[str] = set()  # pods whose init-container usage was shrunk
        self._logged: set[str] = set()
        # Kept by the pod handlers (the informer's dispatch serialises them), read by scrapes.
        # "namespace/name" -> (containers, whether they request HAMi resources), for Pending pods
        self._requests: dict[str, tuple[object, bool]] = {}
        self._pending: dict[str, PendingPod] = {}  # "namespace/name" -> the pod, while it counts
        self._locks: dict[str, str] = {}  # node name -> its node lock's value, kept by the node handlers
        self._scrape_lock = threading.Lock()  # scrapes copy the two above while handlers change them
        self.node_informer = Informer(api_client, ("", "v1", "nodes"), label_selector=node_label_selector)
        self.pod_informer = Informer(api_client, ("", "v1", "pods"))
        self.quota_informer = Informer(api_client, ("", "v1", "resourcequotas"))
        self.node_informer.add_handler(self._node_add, self._node_update, self._node_delete)
        self.pod_informer.add_handler(self._pod_add, self._pod_update, self._pod_delete)
        self.quota_informer.add_handler(self._quota_add, self._quota_update, self._quota_delete)

    def start(self) -> None:
        for informer in (self.node_informer, self.pod_informer, self.quota_informer):
            informer.start()

    def stop(self) -> None:
        for informer in (self.node_informer, self.pod_informer, self.quota_informer):
            informer.stop()

    def informers_synced(self) -> bool:
        return all(i.has_synced() for i in (self.node_informer, self.pod_informer, self.quota_informer))

    def wait_for_informers(self, timeout: float) -> bool:
        return all(
            i.wait_for_sync(timeout) for i in (self.node_informer, self.pod_informer, self.quota_informer)
        )

    def get_pod(self, namespace: str, name: str) -> Obj | None:
        return self.pod_informer.get(f"{namespace}/{name}")

    def get_node(self, name: str) -> Obj | None:
        return self.node_informer.get(name)

    def pending_gpu_pods(self) -> list[PendingPod]:
        """Pods requesting HAMi resources that are still Pending, as the pod handlers left them."""
        with self._scrape_lock:
            return list(self._pending.values())

    def node_locks(self) -> dict[str, str]:
        """The listed nodes that carry a node lock, with its value, as the node handlers left them."""
        with self._scrape_lock:
            return dict(self._locks)

    def _track_pending(self, pod: Obj) -> None:
        """Keep ``pod``'s entry among the pending pods up to date (a pod event's O(1) share of
        the scrape's pending count). Whether a pod requests HAMi resources depends only on its
        containers: the answer is kept with the containers it was read from and reused while they
        are equal (a bind or a status change leaves them as they were)."""
        key = f"{namespace_of(pod)}/{name_of(pod)}"
        spec = pod.get("spec")
        if (pod.get("status") or {}).get("phase") != "Pending" or not isinstance(spec, dict):
            self._forget_pending(key)
            return
        containers = (spec.get("initContainers"), spec.get("containers"))
        known = self._requests.get(key)
        requests = known[1] if known is not None and known[0] == containers else (
            pod_request(pod, self.nvidia) is not None
        )
        # kept with this object's containers: the next compare meets the same lists when the
        # informer hands the same object again
        self._requests[key] = (containers, requests)
        node = spec.get("nodeName")
        with self._scrape_lock:
            if requests:
                self._pending[key] = PendingPod(pod, namespace_of(pod), node if isinstance(node, str) else "")
            else:
                self._pending.pop(key, None)

    def _forget_pending(self, key: str) -> None:
        self._requests.pop(key, None)
        with self._scrape_lock:
            self._pending.pop(key, None)

    def drop_reservation(self, uid: str) -> bool:
        """Forget a pod's reservation, its assignment and its quota usage (a pod that is gone); True
        when /filter had reserved devices that no bind took (a stale reservation)."""
        with self.lock:
            assigned = self.assignments.pop(uid, None) is not None
            old = self.usage.remove(uid)
            if old is not None:
                self.quotas.remove_usage(old.namespace, old.shares)
        return assigned

    # --- informer handlers ----------------------------------------------------------------

    def _node_add(self, obj: Obj) -> None:
        self._track_lock(obj, annotations_of(obj).get(ann.NODE_LOCK))
        self._node_event(obj)

    def _node_delete(self, obj: Obj) -> None:
        self._track_lock(obj, None)
        self._node_event(obj)

    def _track_lock(self, node: Obj, value: str | None) -> None:
        name = name_of(node)
        with self._scrape_lock:
            if value is None:
                self._locks.pop(name, None)
            else:
                self._locks[name] = value

    def _node_event(self, obj: Obj) -> None:
        name = name_of(obj)
        if name:
            with self._work_lock:
                self._dirty.add(name)
            self.wake.set()

    def _node_update(self, old: Obj, new: Obj) -> None:
        # A bind sets and releases the node lock: two updates per pod that change nothing the
        # register pass reads (annotations other than the lock, allocatable); the kubelet's
        # status heartbeats neither. Such a node waits for the next full pass, as unchanged ones do.
        self._track_lock(new, annotations_of(new).get(ann.NODE_LOCK))
        if _register_inputs(old) != _register_inputs(new):
            self._node_event(new)

    def request_full_pass(self) -> None:
        """Revisit every node now (e.g. on becoming leader: handshakes and role labels are due)."""
        with self._work_lock:
            self._full = True
        self.wake.set()

    def take_register_work(self) -> tuple[bool, set[str]]:
        """``(full pass requested, nodes changed since the last call)``, both reset.

        Every bind changes a node twice (lock set, lock released); revisiting only those nodes
        keeps a busy cluster from re-checking all of them on every node event.
        """
        with self._work_lock:
            full, dirty = self._full, self._dirty
            self._full, self._dirty = False, set()
        return full, dirty

    def _allocation(self, pod: Obj) -> PodAllocation | None:
        annos = annotations_of(pod)
        node = annos.get(ann.POD_VGPU_NODE)
        text = annos.get(ann.POD_DEVICES_ALLOCATED)
        if not node or text is None:
            return None
        uid = uid_of(pod)
        try:
            devices = decode_pod_devices(text)
        except CodecError as err:
            self.metrics.decode_errors.labels("pod_devices").inc()
            if uid not in self._logged:
                self._logged.add(uid)
                log.warning(
                    "pod %s/%s: skipping undecodable %s: %s",
                    namespace_of(pod),
                    name_of(pod),
                    ann.POD_DEVICES_ALLOCATED,
                    err,
                )
            return None
        spec = pod.get("spec")
        init = spec.get("initContainers") if isinstance(spec, Mapping) else None
        n_init = len(init) if isinstance(init, list) else 0
        app_only = uid in self._released or _init_done(pod)
        shares = collapse_init_containers(devices, n_init, app_only=app_only)
        mig = self._mig_allocations(pod, uid)
        return PodAllocation(
            uid, namespace_of(pod), name_of(pod), node, shares, mig,
            unreserved(devices, mig),
        )

    def _mig_allocations(self, pod: Obj, uid: str) -> tuple[MigAllocation, ...]:
        """The pod's MIG reservations; an undecodable annotation counts as none (its cards go
        out of service, §6.2) rather than guessing placements."""
        text = annotations_of(pod).get(ann.POD_MIG_ALLOCATIONS)
        if not text:
            return ()
        try:
            return tuple(decode_mig_allocations(text))
        except CodecError as err:
            self.metrics.decode_errors.labels("pod_mig_allocations").inc()
            if uid not in self._logged:
                self._logged.add(uid)
                log.warning(
                    "pod %s/%s: ignoring undecodable %s: %s",
                    namespace_of(pod), name_of(pod), ann.POD_MIG_ALLOCATIONS, err,
                )
            return ()

    def _pod_add(self, pod: Obj) -> None:
        self._pod_update(pod, pod)

    def _pod_update(self, _old: Obj, pod: Obj) -> None:
        self._track_pending(pod)
        if tracing.enabled():  # only a traced filter or bind asks
            self.traces.seen(pod)
        uid = uid_of(pod)
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            self._pod_delete(pod)
            return
        if metadata_of(pod).get("deletionTimestamp"):
            return  # terminating: keep its usage until it is gone
        alloc = self._allocation(pod)
        if alloc is None:
            return
        with self.lock:
            previous = self.usage.get(uid)
            if previous == alloc:
                return
            if _init_done(pod):
                self._released.add(uid)
            self.usage.add(alloc)
            if previous is not None:
                self.quotas.remove_usage(previous.namespace, previous.shares)
            self.quotas.add_usage(alloc.namespace, alloc.shares)

    def _pod_delete(self, pod: Obj) -> None:
        self._forget_pending(f"{namespace_of(pod)}/{name_of(pod)}")
        if tracing.enabled():
            self.traces.gone(pod)
        uid = uid_of(pod)
        self._released.discard(uid)
        self._logged.discard(uid)
        if self.drop_reservation(uid):
            self.metrics.stale_reservations.labels(ann.VENDOR_NVIDIA).inc()

    def _quota_add(self, quota: Obj) -> None:
        with self.lock:
            self.quotas.add_quota(quota)

    def _quota_update(self, old: Obj, new: Obj) -> None:
        with self.lock:
            self.quotas.update_quota(old, new)

    def _quota_delete(self, quota: Obj) -> None:
        with self.lock:
            self.quotas.delete_quota(quota)
