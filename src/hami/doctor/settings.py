"""Thresholds and names the checks compare against, with the reasons for their defaults.

Handshake: the scheduler writes ``Requesting_<local time>`` itself and v2.10 device plugins no longer
answer it, so an old handshake is normal. A node turns unhealthy only when the request is older than
**60 s and** kubelet reports no allocatable ``nvidia.com/gpu`` (docs/design/scheduler-annotations.md §1.3);
the
doctor applies the same rule the scheduler does (``--handshake-timeout``, the allocatable check).

Node lock: expiry is the scheduler's ``--node-lock-timeout`` (default 5m, §1.5). A lock younger than
that holds the node; one held longer than the ``node_lock_held`` duration of the alert thresholds
file (``hami.core.thresholds``, the one HAMiNodeLockHeldTooLong fires after) is reported as holding
it. A pod left in ``bind-phase=allocating`` longer than the expiry has outlived its lock, so the same
figure is the default for a stuck bind (``--bind-timeout``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta, tzinfo

from hami.core import names, thresholds
from hami.core.codec.handshake import HANDSHAKE_TIMEOUT
from hami.core.codec.nodelock import DEFAULT_TIMEOUT

DEFAULT_SCHEDULER_NAME = "hami-scheduler"
# HAMi's chart labels its pods app.kubernetes.io/component=<app>; the guides select app=<app>; this
# project's chart sets both.
SCHEDULER_SELECTORS = (f"{names.COMPONENT_LABEL}={names.SCHEDULER_APP}", names.selector(names.SCHEDULER_APP))
DEVICE_PLUGIN_SELECTORS = (
    f"{names.COMPONENT_LABEL}={names.DEVICE_PLUGIN_APP}",
    names.selector(names.DEVICE_PLUGIN_APP),
)
# The commands the findings suggest, with the guides' namespace and names.
GET_SCHEDULER = f"kubectl get pods -n {names.NAMESPACE} -l {names.selector(names.SCHEDULER_APP)}"
SCHEDULER_LOGS = f"kubectl logs -n {names.NAMESPACE} -l {names.selector(names.SCHEDULER_APP)} --tail=200"
RESTART_SCHEDULER = f"kubectl -n {names.NAMESPACE} rollout restart deployment/{names.SCHEDULER_DEPLOYMENT}"
GET_DEVICE_PLUGIN = (
    f"kubectl get pods -n {names.NAMESPACE} -l {names.selector(names.DEVICE_PLUGIN_APP)} -o wide"
)
DEVICE_PLUGIN_LOGS = f"kubectl logs -n {names.NAMESPACE} <pod> -c {names.DEVICE_PLUGIN_CONTAINER} --tail=100"
# The alert HAMiNodeLockHeldTooLong fires after a lock has held a node this long.
LOCK_HELD_ALERT = "node_lock_held"
_LOCK_HELD = thresholds.alert_for(LOCK_HELD_ALERT)


@dataclass(frozen=True)
class Settings:
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    handshake_timeout: timedelta = HANDSHAKE_TIMEOUT
    node_lock_timeout: timedelta = DEFAULT_TIMEOUT
    bind_timeout: timedelta = DEFAULT_TIMEOUT
    # Zone of the scheduler's handshake timestamps (Go local time); None = this machine's zone.
    scheduler_tz: tzinfo | None = None
    lock_held_alert: timedelta = _LOCK_HELD
