"""Thresholds and names the checks compare against, with the reasons for their defaults.

Handshake: the scheduler writes ``Requesting_<local time>`` itself and v2.10 device plugins no longer
answer it, so an old handshake is normal. A node turns unhealthy only when the request is older than
**60 s and** kubelet reports no allocatable ``nvidia.com/gpu`` (docs/design/scheduler.md §1.3); the
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

from hami.core import thresholds
from hami.core.codec.handshake import HANDSHAKE_TIMEOUT
from hami.core.codec.nodelock import DEFAULT_TIMEOUT

DEFAULT_SCHEDULER_NAME = "hami-scheduler"
# The chart labels its pods app.kubernetes.io/component=hami-scheduler; HAMi's guides use app=hami-scheduler.
SCHEDULER_SELECTORS = ("app.kubernetes.io/component=hami-scheduler", "app=hami-scheduler")
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
