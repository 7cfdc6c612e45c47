"""The ``hami.io/scheduler-role`` labels (§2.1): the leader marks itself ``leader`` and the other
scheduler replicas ``follower`` on each register tick, so ``kubectl get pods -L`` (and
hami-doctor) show which replica binds.

Replicas are the pods labelled ``app.kubernetes.io/component=hami-scheduler`` in ``$POD_NAMESPACE``;
this replica is ``$POD_NAME``. The pods come from the pod informer, and only a label that differs
is patched: a settled cluster costs no API call.

Section signs (§) refer to docs/design/scheduler-annotations.md.
"""

from __future__ import annotations

from typing import Final

from hami.core import annotations as ann
from hami.core import klog, names
from hami.core.kube import errors
from hami.core.kube.patches import patch_pod_metadata
from hami.core.objects import labels_of, name_of, namespace_of
from hami.scheduler.extender.state import ClusterState

log = klog.get_logger(__name__)

LEADER: Final = "leader"
FOLLOWER: Final = "follower"


class RoleLabels:
    def __init__(self, state: ClusterState, api_client: object, namespace: str, own_pod: str) -> None:
        self.state = state
        self.api = api_client
        self.namespace = namespace
        self.own_pod = own_pod

    def reconcile(self) -> None:
        """Called by the leader: own pod ``leader``, every other replica ``follower``."""
        for pod in self.state.pod_informer.list():
            if namespace_of(pod) != self.namespace:
                continue
            labels = labels_of(pod)
            if labels.get(names.COMPONENT_LABEL) != names.SCHEDULER_APP:
                continue
            name = name_of(pod)
            want = LEADER if name == self.own_pod else FOLLOWER
            if labels.get(ann.SCHEDULER_ROLE_LABEL) == want:
                continue
            try:
                patch_pod_metadata(self.api, self.namespace, name, labels={ann.SCHEDULER_ROLE_LABEL: want})
            except errors.ApiError as err:
                self.state.metrics.api_errors.labels("role_label", errors.error_reason(err)).inc()
                self.state.metrics.reconciliation_errors.labels("role_label").inc()
                log.warning(
                    "pod %s/%s: failed to set %s=%s: %s",
                    self.namespace,
                    name,
                    ann.SCHEDULER_ROLE_LABEL,
                    want,
                    err,
                )
                continue
            log.info("pod %s/%s: %s=%s", self.namespace, name, ann.SCHEDULER_ROLE_LABEL, want)
