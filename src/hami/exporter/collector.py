"""The scrape-time collector: read every region, join pods, read NVML, build the families.

Two outputs of the same families: ``collect()`` (prometheus_client metrics, for OpenMetrics and
filtered scrapes) and ``render()`` (text 0.0.4 or OpenMetrics through the cached ``TextRenderer``,
the fast path ``hami.core.serve`` takes for a scrape in either format).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from hami.core import klog
from hami.core.codec.mig import decode_mig_allocations
from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.devices import MigAllocation, PodDevices
from hami.core.kube.metrics import kube_metrics
from hami.core.objects import name_of, namespace_of, uid_of
from hami.core.serve import build_info, listener_metrics
from hami.core.serve.describe import DescribingRegistry, MetricDescriptor
from hami.core.serve.families import Family, TextRenderer, declared_metric, to_metric
from hami.exporter import families
from hami.exporter.attribution import attribute, mig_devices, pod_labels
from hami.exporter.discovery import ContainerLister
from hami.exporter.families import Counters, HostDevice, NodeView
from hami.exporter.host import NVML_CALLS
from hami.exporter.region import reasons
from hami.exporter.region.parse import RegionRejected, RegionSnapshot

log = klog.get_logger(__name__)
# kube-scheduler style exponential buckets: the collection of 1,000 containers stays under 50 ms.
COLLECT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


def collect_duration(registry: CollectorRegistry | None, node: str) -> Histogram:
    """The collection latency of this node's monitor (``node``: the contract's join key)."""
    family = Histogram(
        "hami_monitor_collect_duration_seconds",
        "Time to read every region, join pods and read NVML for one scrape",
        ("node",),
        buckets=COLLECT_BUCKETS,
        registry=registry,
    )
    return family.labels(node)


class Onsets:
    """Which reasons each region newly meets: a region that stays broken is one event, not one per scrape."""

    def __init__(self) -> None:
        self._last: dict[str, frozenset[str]] = {}

    def update(self, now: Mapping[str, frozenset[str]]) -> list[str]:
        """The reasons of ``now`` (region -> reasons met at this read) its region did not meet last time."""
        new = [r for key, met in now.items() for r in met - self._last.get(key, frozenset())]
        self._last = dict(now)
        return new


class Tally:
    """Thread-safe cumulative counts by label value (skip reasons, NVML calls)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, keys: Iterable[str]) -> None:
        with self._lock:
            self._counts.update(keys)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


@dataclass
class RegionRead:
    """One pass over the regions: snapshots by (pod UID, container), and what could not be read."""

    found: dict[tuple[str, str], RegionSnapshot] = field(default_factory=dict)
    unreadable: set[tuple[str, str]] = field(default_factory=set)  # never exported as idle
    states: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> regions meeting it now


class MonitorCollector(Collector):
    def __init__(
        self,
        node: str,
        lister: ContainerLister,
        pods: Callable[[], Sequence[Mapping[str, Any]]],
        decode: Callable[[str], PodDevices],
        hosts: Callable[[], Sequence[HostDevice]] = tuple,
        *,
        skips: Tally | None = None,
        nvml_errors: Tally | None = None,
        legacy: bool = False,
        labels_allowlist: Sequence[str] = (),
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
        decode_mig: Callable[[str], list[MigAllocation]] = decode_mig_allocations,
    ) -> None:
        self.node = node
        self.skips = skips or Tally()
        self.nvml_errors = nvml_errors or Tally()
        self._lister = lister
        self._pods = pods
        self._decode = decode
        self._decode_mig = decode_mig
        self.hosts = hosts
        self._legacy = legacy
        self._allowlist = tuple(labels_allowlist)
        self._clock = clock
        self._duration = collect_duration(registry, node)
        self._warned: set[str] = set()
        self._renderer = TextRenderer()
        self._onsets = Onsets()

    def read_regions(self) -> RegionRead:
        """Snapshot every loaded region; count states, skip reasons met now, and their onsets."""
        out = RegionRead()
        states: Counter[str] = Counter()
        met: dict[str, frozenset[str]] = {}
        with self._lister.lock:
            for c in self._lister.containers():
                if c.region is None:
                    if c.open_error is None:
                        states["initialising"] += 1
                        continue
                    states["skipped"] += 1
                    out.unreadable.add((c.pod_uid, c.name))
                    met[c.dirname] = frozenset({c.open_error.reason})
                    continue
                snap = c.region.read()
                if isinstance(snap, RegionRejected):
                    states[snap.state] += 1
                    if snap.reason:
                        out.unreadable.add((c.pod_uid, c.name))
                        met[c.dirname] = frozenset({snap.reason})
                        self._warn_once(c.dirname, f"Skipping region of {c.dirname}: {snap.detail}")
                    continue
                states["ok"] += 1
                if snap.issues:
                    met[c.dirname] = frozenset(snap.issues)
                out.found.setdefault((c.pod_uid, c.name), snap)
            self.skips.add(self._onsets.update(met))
        out.states = dict(states)
        out.skipped = dict(Counter(r for reasons in met.values() for r in reasons))
        return out

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)

    def _decode_failed(self, pod: Mapping[str, Any], err: Exception) -> None:
        self._pod_error(pod, f"failed to decode pod devices: {err}")

    def _pod_error(self, pod: Mapping[str, Any], detail: str) -> None:
        where = f"{namespace_of(pod)}/{name_of(pod)}"
        self._warn_once(f"{uid_of(pod)}: {detail}", f"Pod {where}: {detail}")

    def view(self) -> NodeView:
        read = self.read_regions()
        pods = list(self._pods())
        containers = attribute(pods, read.found, self._decode, self._decode_failed, read.unreadable)
        return NodeView(
            node=self.node,
            now=self._clock(),
            hosts=tuple(self.hosts()),
            containers=tuple(containers),
            pod_labels=tuple(pod_labels(pods, self._allowlist)),
            migs=tuple(mig_devices(pods, self._decode_mig, self._pod_error)),
            regions=read.states,
            skipped=read.skipped,
        )

    def families(self) -> list[Family]:
        view = self.view()
        counters = Counters(self.skips.snapshot(), self.nvml_errors.snapshot())
        return [
            *families.host_families(view, self._legacy),
            *families.container_families(view, self._legacy),
            *families.mig_families(view, self._legacy),
            *families.pod_label_families(view),
            *families.self_families(view, counters, reasons.ALL, NVML_CALLS),
        ]

    def collect(self) -> Iterator[Metric]:
        start = time.perf_counter()
        out = [to_metric(f) for f in self.families()]
        self._duration.observe(time.perf_counter() - start)
        yield from out

    def render(self, openmetrics: bool) -> bytes:
        """The same families as ``collect()``, as text 0.0.4 or an OpenMetrics body (no ``# EOF``)."""
        start = time.perf_counter()
        body = self._renderer.render(self.families(), openmetrics)
        self._duration.observe(time.perf_counter() - start)
        return body

    def describe(self) -> Iterator[Metric]:
        declared = families.describe(self._legacy, pod_labels=bool(self._allowlist))
        return iter(declared_metric(f) for f in declared)


def describe(legacy: bool = False) -> list[MetricDescriptor]:
    """The monitor's metric descriptors, declared as ``hami-monitor`` declares them (docs/metrics.md)."""
    registry = DescribingRegistry()
    build_info("monitor", registry)
    kube_metrics(registry)
    # never scanned nor collected: describe() needs no regions, pods or NVML
    lister = ContainerLister("/nonexistent")
    collector = MonitorCollector(
        "", lister, tuple, decode_pod_devices, legacy=legacy, labels_allowlist=("app",), registry=registry
    )
    registry.register(collector)
    listener_metrics(registry)
    return registry.descriptors()
