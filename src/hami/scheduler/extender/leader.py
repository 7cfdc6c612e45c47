"""Leadership by observing kube-scheduler's Lease (§6.5); the extender never campaigns.

With ``--leader-elect`` this replica leads while the Lease ``<name>`` in ``<namespace>`` names a
holder starting with our identity (the hostname, as the sidecar kube-scheduler's identity starts
with it) and was renewed, as observed by us, within ``leaseDurationSeconds``. Without it, every
replica leads. Only the leader writes handshakes and binds; followers keep warm caches and answer
``/filter``.

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from hami.core import klog
from hami.core.kube.informer import Informer

log = klog.get_logger(__name__)

Obj = dict[str, Any]
DEFAULT_LEASE_SECONDS = 15.0


class Leadership:
    def __init__(
        self,
        api_client: Any | None,
        *,
        enabled: bool,
        name: str = "",
        namespace: str = "",
        identity: str | None = None,
        on_elected: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = enabled
        self.identity = identity or socket.gethostname()
        self.on_elected = on_elected
        self.clock = clock
        self._lock = threading.Lock()
        self._holder = ""
        self._observed = float("-inf")
        self._duration = DEFAULT_LEASE_SECONDS
        self._was_leader = False
        self.informer: Informer | None = None
        if enabled:
            if not name or not namespace:
                raise ValueError(
                    "--leader-elect needs --leader-elect-resource-name and --leader-elect-resource-namespace"
                )
            self.informer = Informer(
                api_client,
                ("coordination.k8s.io", "v1", "leases"),
                namespace=namespace,
                field_selector=f"metadata.name={name}",
            )
            self.informer.add_handler(self._seen, lambda _old, new: self._seen(new), self._gone)

    def start(self) -> None:
        if self.informer is not None:
            self.informer.start()

    def stop(self) -> None:
        if self.informer is not None:
            self.informer.stop()

    def _seen(self, lease: Obj) -> None:
        spec = lease.get("spec") or {}
        with self._lock:
            self._holder = str(spec.get("holderIdentity") or "")
            self._duration = float(spec.get("leaseDurationSeconds") or DEFAULT_LEASE_SECONDS)
            self._observed = self.clock()
        self.is_leader()

    def _gone(self, _lease: Obj) -> None:
        with self._lock:
            self._holder = ""
        self.is_leader()

    def is_leader(self) -> bool:
        if not self.enabled:
            return True
        with self._lock:
            leader = (
                bool(self._holder)
                and self._holder.startswith(self.identity)
                and self.clock() - self._observed < self._duration
            )
            changed = leader != self._was_leader
            self._was_leader = leader
        if changed:
            log.info(
                "leadership %s (lease holder %r, identity %r)",
                "acquired" if leader else "lost",
                self._holder,
                self.identity,
            )
            if leader:
                self.on_elected()
        return leader
