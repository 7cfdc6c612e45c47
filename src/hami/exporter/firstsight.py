"""The monitor's span in a pod's trace: the first scrape that joins a container's region to its pod
(docs/design/tracing.md). With tracing off, ``FirstSight.update`` returns at its first line."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hami.core import tracing
from hami.core.objects import uid_of
from hami.exporter.reconcile import ContainerKey

SPAN = "hami.monitor.region_first_seen"


class FirstSight:
    """Remembers the region keys present at the last scrape; a key seen for the first time with its
    pod known gets one span in that pod's trace. A key whose pod is not known yet is tried again
    at the next scrape; a key whose region went is forgotten (so memory follows the regions)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._seen: frozenset[ContainerKey] = frozenset()

    def update(self, pods: Sequence[Mapping[str, Any]], regions: Iterable[ContainerKey]) -> None:
        if not tracing.enabled():
            return
        present = frozenset(regions)
        new = present - self._seen
        if not new:
            self._seen = present
            return
        by_uid = {uid_of(p): p for p in pods}
        sighted = set()
        for uid, container in sorted(new):
            pod = by_uid.get(uid)
            if pod is None:
                continue
            sighted.add((uid, container))
            where = {"k8s.container.name": container, "k8s.node.name": self.node}
            tracing.end(tracing.pod_span(SPAN, pod, attributes=where, bound_only=True))
        self._seen = (present & self._seen) | sighted
