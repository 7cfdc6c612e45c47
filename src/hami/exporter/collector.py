"""The scrape-time collector: read every region, join pods, read NVML, build the families.

Two outputs of the same families (``hami.exporter.exposition``): ``collect()`` (prometheus_client
metrics, for OpenMetrics and filtered scrapes) and ``render()`` (text 0.0.4 or OpenMetrics through
the cached ``TextRenderer``, the fast path ``hami.core.serve`` takes for a scrape in either format).
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
from hami.core.tracing import tracing_metrics
from hami.exporter.attribution import ContainerView, unlimited_containers
from hami.exporter.cgroups import owner_of
from hami.exporter.container_text import ContainerText
from hami.exporter.discovery import ContainerLister
from hami.exporter.driver import DriverReader
from hami.exporter.exposition import declarations, scrape_families
from hami.exporter.firstsight import FirstSight
from hami.exporter.node_families import REGION_STATES
from hami.exporter.podjoin import PodJoin
from hami.exporter.reconcile import Settled, counts, driver_limited, driver_only, memory_findings
from hami.exporter.region.parse import RegionRejected, RegionSnapshot
from hami.exporter.view import Counters, DriverView, HostDevice, NodeView

log = klog.get_logger(__name__)
# kube-scheduler style exponential buckets around the 50 ms target for 1,000 containers (bench_exporter).
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
        proc_root: str = "/proc",
        driver: DriverReader | None = None,
    ) -> None:
        self.node = node
        self.skips = skips or Tally()
        self.nvml_errors = nvml_errors or Tally()
        self._lister = lister
        self._pods = pods
        self._decode = decode
        self.hosts = hosts
        self._legacy = legacy
        self._allowlist = tuple(labels_allowlist)
        self._clock = clock
        self._proc_root = proc_root
        self._duration = collect_duration(registry, node)
        self._warned: set[str] = set()
        self._pod_join = PodJoin(decode, decode_mig, labels_allowlist, self._decode_failed, self._pod_error)
        self._renderer = TextRenderer()
        self._container_text = ContainerText()
        self._render_lock = threading.Lock()
        self._onsets = Onsets()
        self._driver = driver
        self._cgroup_onsets = Onsets()  # the driver reader's refused cgroups, counted as regions are
        self._first_sight = FirstSight(node)
        self._settled = Settled()

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
            log.warning("collection: %s", message)

    def _decode_failed(self, pod: Mapping[str, Any], err: Exception) -> None:
        self._pod_error(pod, f"failed to decode pod devices: {err}")

    def _pod_error(self, pod: Mapping[str, Any], detail: str) -> None:
        where = f"{namespace_of(pod)}/{name_of(pod)}"
        self._warn_once(f"{uid_of(pod)}: {detail}", f"Pod {where}: {detail}")

    def view(self) -> NodeView:
        read = self.read_regions()
        with self._lister.lock:
            region_files = {(c.pod_uid, c.name): c.cache_path is not None for c in self._lister.containers()}
        pods = list(self._pods())
        hosts = tuple(self.hosts())
        side = self._pod_join.side(pods, read.found, read.unreadable)
        containers = self._pod_join.containers(side, read.found)
        driver = self._read_driver(pods, containers, hosts)
        self._first_sight.update(pods, side.regions)
        owners = [o for h in hosts for pid in h.pids if (o := owner_of(pid, self._proc_root)) is not None]
        limited = driver.limited()  # the driver enforces their limits: not "unlimited"
        unlimited = [
            u
            for u in unlimited_containers(pods, owners, region_files, self._decode)
            if (u.namespace, u.pod, u.container) not in limited
        ]
        for u in unlimited:
            self._warn_once(
                f"unlimited {u.namespace}/{u.pod}/{u.container}",
                f"Container {u.namespace}/{u.pod}/{u.container} runs {u.processes} GPU process(es) without "
                f"HAMi-core ({u.reason}): its vGPU limits are not enforced",
            )
        return NodeView(
            node=self.node,
            now=self._clock(),
            hosts=hosts,
            unlimited=tuple(unlimited),
            containers=containers,
            inconsistencies=counts(
                self._settled.observe(
                    [
                        # a container the driver limits has no region by design
                        *(f for f in side.findings if not driver_limited(f, limited)),
                        *memory_findings(read.found, hosts, driver_only(containers, driver.usage)),
                    ],
                    read.found,
                )
            ),
            pod_labels=side.pod_labels,
            migs=side.migs,
            regions=read.states,
            skipped=dict(Counter(read.skipped) + Counter(driver.skipped or {})),
            driver=driver,
        )

    def _read_driver(
        self,
        pods: Sequence[Mapping[str, Any]],
        containers: Sequence[ContainerView],
        hosts: Sequence[HostDevice],
    ) -> DriverView:
        """The driver's accounting, its refused cgroups counted once each and logged once."""
        if self._driver is None:
            return DriverView()
        driver = self._driver.read(pods, containers, hosts)
        refused = driver.refused or {}
        self.skips.add(self._cgroup_onsets.update(refused))
        for rel, met in refused.items():
            self._warn_once(f"cgroup {rel}", f"Cgroup {rel}: refused ({', '.join(sorted(met))})")
        return driver

    def families(self, rendered: bool = False) -> list[Family]:
        """This scrape's families; ``rendered``: the container ones as text (``ContainerText``),
        for ``render`` alone."""
        log.v(4).info("Starting to collect metrics for vGPUMonitor")
        start = time.perf_counter()
        view = self.view()
        if log.v(4):
            self._log_view(view, time.perf_counter() - start)
        counters = Counters(self.skips.snapshot(), self.nvml_errors.snapshot())
        return scrape_families(view, counters, self._legacy, self._container_text if rendered else None)

    @staticmethod
    def _log_view(view: NodeView, seconds: float) -> None:
        """V4: what one collection found; V5: every GPU and every container device, UUID by UUID."""
        if log.v(5):
            for h in view.hosts:
                log.v(5).info(
                    "GPU %d %s (%s): memory used %s of %s bytes, utilization %s%%, temperature %s C",
                    h.index,
                    h.uuid,
                    h.type,
                    h.memory_used,
                    h.memory_total,
                    h.util_gpu,
                    h.temperature,
                )
            for c in view.containers:
                source = "region" if c.started else "allocation annotation, no region yet"
                for d in c.devices:
                    log.v(5).info(
                        "Container %s/%s/%s vdevice %d: uuid %s, used %d of %d bytes, SM %d%% of %d%% (%s)",
                        c.namespace,
                        c.pod,
                        c.container,
                        d.index,
                        d.uuid,
                        d.used_bytes,
                        d.limit_bytes,
                        d.sm_util_percent,
                        d.sm_limit_percent,
                        source,
                    )
        regions = " ".join(f"{state}={view.regions.get(state, 0)}" for state in REGION_STATES)
        idle = sum(1 for c in view.containers if not c.started)
        log.v(4).info(
            "Finished collecting metrics for vGPUMonitor: %d container(s) (%d without a region yet), "
            "%d host GPU(s), regions %s, %d MIG allocation(s), in %.1f ms",
            len(view.containers),
            idle,
            len(view.hosts),
            regions,
            len(view.migs),
            seconds * 1000,
        )

    def collect(self) -> Iterator[Metric]:
        start = time.perf_counter()
        out = [to_metric(f) for f in self.families()]
        self._duration.observe(time.perf_counter() - start)
        yield from out

    def render(self, openmetrics: bool) -> list[bytes]:
        """The same families as ``collect()``, as text 0.0.4 or an OpenMetrics body (no ``# EOF``),
        in pieces (``TextRenderer.render``)."""
        start = time.perf_counter()
        with self._render_lock:  # the container lines' cache is the scrape's
            body = self._renderer.render(self.families(rendered=True), openmetrics)
        self._duration.observe(time.perf_counter() - start)
        return body

    def describe(self) -> Iterator[Metric]:
        return iter(declared_metric(d) for d in declarations(self._legacy, pod_labels=bool(self._allowlist)))


def describe(legacy: bool = False) -> list[MetricDescriptor]:
    """The monitor's metric descriptors, declared as ``hami-monitor`` declares them (docs/metrics.md)."""
    registry = DescribingRegistry()
    build_info("monitor", registry)
    kube_metrics(registry)
    tracing_metrics(registry)
    # never scanned nor collected: describe() needs no regions, pods or NVML
    lister = ContainerLister("/nonexistent")
    collector = MonitorCollector(
        "", lister, tuple, decode_pod_devices, legacy=legacy, labels_allowlist=("app",), registry=registry
    )
    registry.register(collector)
    listener_metrics(registry)
    return registry.descriptors()
