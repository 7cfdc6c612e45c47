"""The pod side of a scrape, kept while the pods and the set of regions stay the same.

Which containers get series, the allocations of those without a region, the reconciler's pod
findings, the MIG identities and the allow-listed pod labels depend on the pod objects and on which
regions exist, not on what the regions hold. The informer hands out the same pod objects until a
pod changes (an event replaces the object, nothing edits it in place), so they are derived again
only when an object in the list, or a region key, differs from the last scrape's. The regions'
values join each scrape (``PodJoin.containers``); a container's view is reused while its snapshot
object is (``RegionFile.read`` returns the same one for unchanged copies).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami.core.devices import MigAllocation, PodDevices
from hami.exporter.attribution import (
    ContainerView,
    MigView,
    Planned,
    PodLabels,
    mig_devices,
    plan,
    pod_labels,
    view_of,
)
from hami.exporter.reconcile import ContainerKey, Inconsistency, pod_findings
from hami.exporter.region.parse import RegionSnapshot

Pod = Mapping[str, Any]


@dataclass(frozen=True)
class PodSide:
    pods: tuple[Pod, ...]
    regions: frozenset[ContainerKey]
    unreadable: frozenset[ContainerKey]
    plan: tuple[Planned, ...]
    findings: tuple[Inconsistency, ...]
    migs: tuple[MigView, ...]
    pod_labels: tuple[PodLabels, ...]


class PodJoin:
    def __init__(
        self,
        decode: Callable[[str], PodDevices],
        decode_mig: Callable[[str], list[MigAllocation]],
        allowlist: Sequence[str],
        on_decode_error: Callable[[Pod, Exception], None],
        on_pod_error: Callable[[Pod, str], None],
    ) -> None:
        self._decode = decode
        self._decode_mig = decode_mig
        self._allowlist = tuple(allowlist)
        self._on_decode_error = on_decode_error
        self._on_pod_error = on_pod_error
        self._side: PodSide | None = None
        self._views: dict[ContainerKey, tuple[Planned, RegionSnapshot | None, ContainerView]] = {}

    def side(
        self,
        pods: Sequence[Pod],
        regions: Mapping[ContainerKey, RegionSnapshot],
        unreadable: set[ContainerKey],
    ) -> PodSide:
        """The pod side for these pods and region keys: the last one while they are the same."""
        keys, skipped = frozenset(regions), frozenset(unreadable)
        last = self._side
        if (
            last is not None
            and last.regions == keys
            and last.unreadable == skipped
            and len(last.pods) == len(pods)
            and all(a is b for a, b in zip(last.pods, pods, strict=True))
        ):
            return last
        side = self._side = PodSide(
            pods=tuple(pods),
            regions=keys,
            unreadable=skipped,
            plan=tuple(plan(pods, keys, self._decode, self._on_decode_error, skipped)),
            findings=tuple(pod_findings(pods, keys, skipped, decode=self._decode)),
            migs=tuple(mig_devices(pods, self._decode_mig, self._on_pod_error)),
            pod_labels=tuple(pod_labels(pods, self._allowlist)),
        )
        return side

    def containers(
        self, side: PodSide, regions: Mapping[ContainerKey, RegionSnapshot]
    ) -> tuple[ContainerView, ...]:
        """The views of ``side``'s containers with this scrape's snapshots."""
        previous, current = self._views, {}
        out = []
        for p in side.plan:
            snap = regions.get(p.key)
            known = previous.get(p.key)
            view = known[2] if known is not None and known[0] is p and known[1] is snap else view_of(p, snap)
            current[p.key] = (p, snap, view)
            out.append(view)
        self._views = current
        return tuple(out)
