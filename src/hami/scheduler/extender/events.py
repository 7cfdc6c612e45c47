"""Pod events of the extender (§5.4) with HAMi's messages, counted in ``hami_scheduler_events_total``.

Besides HAMi's per-reason FilteringFailed events (``2 nodes CardInsufficientMemory(n1,n2)``), a
failed filter records the operator-facing line docs/guides/scheduler-debugging.md §3.1 shows in ``kubectl
describe pod``: ``Bindingfailed: CardInsufficientMemory on node gpu-node-01`` (one per reason type, at most
``hami.core.reasons.MAX_NODES_LISTED`` nodes named). The messages are the reason catalogue's
(``hami.core.reasons``), which hami-doctor reads back.

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

from hami.core import klog
from hami.core import reasons as r
from hami.core.kube.events import NORMAL, WARNING, EventRecorder, ObjectRef
from hami.scheduler.engine.requests import Clamps
from hami.scheduler.extender.metrics import SchedulerMetrics

FILTERING_FAILED: Final = "FilteringFailed"
FILTERING_SUCCEED: Final = "FilteringSucceed"
BINDING_FAILED: Final = "BindingFailed"
BINDING_SUCCEED: Final = "BindingSucceed"
# Not HAMi's (it only logs the clamps): say on the pod what the filter changed in its request.
REQUEST_CLAMPED: Final = "GPUCoresClamped"
PERCENTAGE_CLAMPED: Final = "GPUMemPercentageClamped"
# kube-scheduler retries /filter for a pending pod every few seconds: the clamp is reported for the
# pods (by UID) not among the last this many reported, so a retry neither repeats it nor counts it.
CLAMPED_PODS_REMEMBERED: Final = 4096

log = klog.get_logger(__name__)


class PodEvents:
    def __init__(self, recorder: EventRecorder | None, metrics: SchedulerMetrics) -> None:
        self.recorder = recorder
        self.metrics = metrics
        self._clamped: OrderedDict[str, None] = OrderedDict()  # UIDs already reported, oldest first
        self._clamped_lock = threading.Lock()

    def record(self, pod: ObjectRef, type_: str, reason: str, message: str) -> None:
        self.metrics.events.labels(reason).inc()
        # docs/guides/scheduler-debugging.md §3.2 greps the scheduler's log for "FilteringFailed" and for the
        # pod's name.
        if reason == BINDING_FAILED:  # an error, as HAMi's "Failed to bind pod" and hami-doctor's catalogue
            log.error("%s %s/%s: %s", reason, pod.namespace, pod.name, message)
        elif type_ == WARNING:
            log.warning("%s %s/%s: %s", reason, pod.namespace, pod.name, message)
        elif klog.v(4):
            log.info("%s %s/%s: %s", reason, pod.namespace, pod.name, message)
        if self.recorder is not None:
            self.recorder.event(pod, type_, reason, message)

    def filtering(
        self, pod: Mapping[str, Any], events: list[tuple[str, str]], failed: Mapping[str, str] | None = None
    ) -> None:
        ref = ObjectRef.from_object(dict(pod), kind="Pod")
        for type_, message in events:
            self.record(ref, type_, FILTERING_SUCCEED if type_ == NORMAL else FILTERING_FAILED, message)
        if failed:
            for message in r.node_list_messages(failed):
                self.record(ref, WARNING, FILTERING_FAILED, message)

    def clamped(self, pod: Mapping[str, Any], clamps: Clamps) -> None:
        """The clamps' Warning events and counts, once per pod however often it is filtered."""
        ref = ObjectRef.from_object(dict(pod), kind="Pod")
        key = ref.uid or f"{ref.namespace}/{ref.name}"
        with self._clamped_lock:  # /filter calls run concurrently
            if key in self._clamped:
                self._clamped.move_to_end(key)
                return
            self._clamped[key] = None
            if len(self._clamped) > CLAMPED_PODS_REMEMBERED:
                self._clamped.popitem(last=False)
        if clamps.cores:
            self.metrics.cores_clamped.inc()
        if clamps.percentage:
            self.metrics.percentage_clamped.inc()
        for message in clamps.cores:
            self.record(ref, WARNING, REQUEST_CLAMPED, message)
        for message in clamps.percentage:
            self.record(ref, WARNING, PERCENTAGE_CLAMPED, message)

    def binding_failed(self, ref: ObjectRef, message: str) -> None:
        self.record(ref, WARNING, BINDING_FAILED, message)

    def binding_succeed(self, ref: ObjectRef, node: str) -> None:
        self.record(
            ref, NORMAL, BINDING_SUCCEED, f"Successfully binding node [{node}] to {ref.namespace}/{ref.name}"
        )
