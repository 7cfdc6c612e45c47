"""Thresholds and names the checks compare against, with the reasons for their defaults.

Handshake: HAMi's scheduler guide (see docs/guides/scheduler-debugging.md §3.5) says a handshake older than
300 s makes the scheduler refuse the node and its check script compares a Unix timestamp. HAMi v2.10
(docs/design/scheduler.md §1.3) works differently and the code wins: the value is ``Requesting_<local time>``
written by the scheduler itself, the device plugin no longer answers it, and a node turns unhealthy only when
the request is older than **60 s and** kubelet reports no allocatable ``nvidia.com/gpu``. The 300 s figure is
the stale "5 minutes" of HAMi's protocol notes (docs/design/scheduler.md §9.1). So the doctor uses 60 s
(``--handshake-timeout``) together with the allocatable check.

Node lock: expiry is the scheduler's ``--node-lock-timeout`` (default 5m, §1.5). A pod left in
``bind-phase=allocating`` longer than that has outlived its lock, so the same figure is the default
for a stuck bind (``--bind-timeout``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta, tzinfo

from hami.core.codec.handshake import HANDSHAKE_TIMEOUT
from hami.core.codec.nodelock import DEFAULT_TIMEOUT

DEFAULT_SCHEDULER_NAME = "hami-scheduler"
# The chart labels its pods app.kubernetes.io/component=hami-scheduler; HAMi's guide uses app=hami-scheduler
# (docs/guides/scheduler-debugging.md §8).
SCHEDULER_SELECTORS = ("app.kubernetes.io/component=hami-scheduler", "app=hami-scheduler")


@dataclass(frozen=True)
class Settings:
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    handshake_timeout: timedelta = HANDSHAKE_TIMEOUT
    node_lock_timeout: timedelta = DEFAULT_TIMEOUT
    bind_timeout: timedelta = DEFAULT_TIMEOUT
    # Zone of the scheduler's handshake timestamps (Go local time); None = this machine's zone.
    scheduler_tz: tzinfo | None = None
