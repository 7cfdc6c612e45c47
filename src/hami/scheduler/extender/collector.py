"""Scrape-time metrics from the caches: node states, handshakes, locks, leadership, allocations.

HAMi's §7.1 families (``zone="vGPU"``, memory in bytes = MiB × 1048576) are always exported; the
pre-2.9 CamelCase names only with ``--legacy-metrics``, also with ``zone`` (HAMi registers the whole
collector through ``WrapRegistererWith({"zone": "vGPU"})``). Everything is read under the state lock
in one pass, so a scrape sees one consistent snapshot.

The families (declared in ``.families``) are plain ``Family`` rows (``hami.core.serve.families``):
``render()`` writes them through the cached ``TextRenderer`` (a plain scrape of 1,000 nodes × 8
GPUs is ~66k series, and the extender holds the GIL while it renders), ``collect()`` yields them as
prometheus_client metrics for every other request; ``hami.core.serve`` picks between the two (its
``Exposition``). The rendered path joins the text ``SeriesText`` (``.series_text``) keeps between
scrapes: each node's per-device lines, each pod's per-container lines and each node's scheduler
lines, redone when a reservation or a node changes. The pending pods and the node locks come kept
up to date by the informer handlers (``ClusterState``).
tests/scheduler/test_collector_exposition.py checks it byte for byte against prometheus_client as
reservations come and go.

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from hami.core import annotations as ann
from hami.core.codec.nodelock import DEFAULT_TIMEOUT
from hami.core.kube.metrics import kube_metrics
from hami.core.serve import build_info, listener_metrics
from hami.core.serve.describe import DescribingRegistry, MetricDescriptor, describe_families
from hami.core.serve.families import Family, TextRenderer, declared_metric, to_metric
from hami.core.tracing import tracing_metrics
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.engine.usage import PodAllocation
from hami.scheduler.extender.decisions import BOUND_REASON, DecisionStore
from hami.scheduler.extender.families import (
    ALLOCATION,
    CACHE_SYNCED,
    DECISION_RECORDS,
    HANDSHAKE_AGE,
    IS_LEADER,
    LEGACY_MIG,
    LEGACY_QUOTA_USED,
    LOCK_HELD,
    MIG_INFO,
    NODE_SCHEDULABLE,
    NODES,
    PENDING_PODS,
    QUOTA_LIMIT,
    QUOTA_USED,
    STATE,
    ZONE,
    PodColumn,
    Use,
    state_families,
)
from hami.scheduler.extender.metrics import SchedulerMetrics
from hami.scheduler.extender.schedulable import SCHEDULABLE, devices_reason, node_reason
from hami.scheduler.extender.series_text import (
    IDLE,
    DeviceLayout,
    NodeText,
    SeriesText,
    pod_series,
)
from hami.scheduler.extender.state import NODE_STATES, ClusterState, NodeRecord

_UNLOCKED: Mapping[str, str] = {}  # the annotations ``node_reason`` reads of a node without a lock


class StateCollector(Collector):
    """The extender's scrape-time families, served as ``hami.core.serve``'s ``Exposition``."""

    def __init__(
        self,
        state: ClusterState,
        is_leader: Callable[[], bool],
        legacy: bool = False,
        *,
        now: Callable[[], datetime] = lambda: datetime.now().astimezone(),
        lock_timeout: timedelta = DEFAULT_TIMEOUT,
        decisions: DecisionStore | None = None,
    ) -> None:
        self.state = state
        self.is_leader = is_leader
        self.legacy = legacy
        self.now = now
        self.lock_timeout = lock_timeout  # the expiry the extender's NodeLocker enforces
        self.decisions = decisions if decisions is not None else DecisionStore()
        self._renderer = TextRenderer()
        self._text = SeriesText(state, legacy)  # the rendered path's text between scrapes
        # Outside the state lock: two scrapes at once may each replace this with their own; every
        # entry is keyed by all its text depends on, so a race costs a re-render, never a wrong line.
        self._device_reasons: dict[int, tuple[NodeState, str]] = {}  # id(NodeState) -> it, devices_reason

    def describe(self) -> Iterator[Metric]:
        return iter(declared_metric(f) for f in state_families(self.legacy))

    def families(self) -> list[Family]:
        return [*self._scheduler(), *self._allocations()]

    def collect(self) -> Iterator[Metric]:
        return iter([to_metric(f) for f in self.families()])

    def render(self, openmetrics: bool) -> list[bytes]:
        """The same families as ``collect()``, as text 0.0.4 or an OpenMetrics body (no ``# EOF``),
        in pieces (``TextRenderer.render``)."""
        families = [*self._scheduler(rendered=True), *self._allocations(rendered=True)]
        return self._renderer.render(families, openmetrics)

    def _scheduler(self, rendered: bool = False) -> list[Family]:
        """The extender's own state families. ``rendered``: the per-node series (handshake age,
        lock, schedulable) come as text from label sets kept per node between scrapes; only the
        age's value is formatted every time."""
        fams = STATE.scrape(legacy=False)
        leader, synced, pending, states = fams[IS_LEADER], fams[CACHE_SYNCED], fams[PENDING_PODS], fams[NODES]
        ages, held, schedulable = fams[HANDSHAKE_AGE], fams[LOCK_HELD], fams[NODE_SCHEDULABLE]
        size = fams[DECISION_RECORDS]
        is_leader = self.is_leader()
        leader.add((), 1.0 if is_leader else 0.0)
        synced.add((), 1.0 if self.state.synced.is_set() and self.state.informers_synced() else 0.0)
        size.add((), float(len(self.decisions)))
        if is_leader:  # kube-scheduler asks the leader's extender: followers hold no decisions
            reasons = Counter(
                (p.namespace, BOUND_REASON if p.node else self.decisions.pending_reason(p.pod))
                for p in self.state.pending_gpu_pods()
            )
            for labels, n in sorted(reasons.items()):
                pending.add(labels, float(n))
        now = self.now()
        with self.state.lock:
            counts = dict.fromkeys(NODE_STATES, 0)
            records = dict(self.state.records)
            handshakes: list[tuple[str, float]] = []
            for name, record in records.items():
                counts[record.state] = counts.get(record.state, 0) + 1
                if record.handshake is not None:
                    handshakes.append((name, max((now - record.handshake).total_seconds(), 0.0)))
        for st, n in counts.items():
            states.add((st,), float(n))
        locks = self.state.node_locks()
        verdicts = self.node_reasons(records, now, locks)
        locked = sorted(locks)
        if rendered:
            self._text.node_series(
                handshakes, verdicts, locked, ages=ages, schedulable=schedulable, held=held
            )
        else:
            for name, age in handshakes:
                ages.add((name,), age)
            for reason, name in verdicts:
                schedulable.add((name, reason), 1.0 if reason == SCHEDULABLE else 0.0)
            for name in locked:
                held.add((name,), 1.0)
        return fams.families()

    def node_reasons(
        self, records: dict[str, NodeRecord], now: datetime, locks: Mapping[str, str],
    ) -> list[tuple[str, str]]:
        """(reason, node) for every node the register pass has seen; ``locks``: the listed nodes'
        lock annotations. A ``NodeState``'s device verdict is kept while the record holds that object."""
        def pod_exists(namespace: str, name: str) -> bool:
            return self.state.get_pod(namespace, name) is not None

        known, seen = self._device_reasons, dict[int, tuple[NodeState, str]]()

        def devices(node: NodeState) -> str:
            held = known.get(id(node))
            if held is None or held[0] is not node:  # a live object's id is its own
                held = (node, devices_reason(node))
            seen[id(node)] = held
            return held[1]

        out = [
            (node_reason(records[name], {ann.NODE_LOCK: locks[name]} if name in locks else _UNLOCKED, now,
                         self.lock_timeout, pod_exists, devices=devices), name)
            for name in sorted(records)
        ]
        self._device_reasons = seen
        return out

    def _allocations(self, rendered: bool = False) -> list[Family]:
        """HAMi's §7.1 families. ``rendered``: the per-device and per-pod series come as the text
        ``SeriesText`` keeps, one bytes piece per family (a scrape at 1,000 nodes × 8 GPUs would
        otherwise format ~66k lines); only a node with a new ``NodeState`` is rendered here."""
        fams = ALLOCATION.scrape(self.legacy)
        layout, pod_columns = self._text.devices, self._text.pods
        device_families = [fams[c.declared] for c in layout.columns]
        nodes: dict[str, NodeText] = {}
        with self.state.lock:
            usage = self.state.usage
            if rendered:
                self._text.refresh_nodes()
            for name, node in self.state.nodes.items():
                if not rendered:
                    self._device_rows(layout, device_families, name, node, usage.node_usage(name))
                    continue
                nodes[name] = self._text.node(name, node)
            if nodes:  # one piece per family, joined in C
                columns = zip(*[n.text for n in nodes.values()], strict=True)
                for family, chunks in zip(device_families, columns, strict=True):
                    family.text.append(b"".join(chunks))
            legacy_quota = fams.get(LEGACY_QUOTA_USED)
            for ns, rname, entry in self.state.quotas.items():
                limit = str(entry.limit) if entry.limit_set else "0"
                fams[QUOTA_USED].add((ns, rname, limit, ZONE), entry.used)
                if entry.limit_set:
                    fams[QUOTA_LIMIT].add((ns, rname, ZONE), entry.limit)
                if legacy_quota is not None:
                    legacy_quota.add((ns, rname, limit, ZONE), entry.used)
            pod_families = [fams[c.declared] for c in pod_columns]
            texts = list[tuple[bytes, ...]]()
            for alloc in usage.pods():
                if alloc.mig:
                    self._mig_instances(alloc, fams[MIG_INFO], fams.get(LEGACY_MIG))
                if not rendered:
                    self._pod_rows(pod_columns, pod_families, alloc)
                    continue
                texts.append(self._text.pod(alloc))
            if texts:
                for family, chunks in zip(pod_families, zip(*texts, strict=True), strict=True):
                    family.text.append(b"".join(chunks))
            if rendered:  # only the nodes this scrape saw: the cache cannot outgrow the cluster
                self._text.nodes = nodes
        return fams.families()

    @staticmethod
    def _device_rows(
        layout: DeviceLayout, families: Sequence[Family], name: str, node: NodeState, usage: dict[str, Use],
    ) -> None:
        for d in node.devices:
            values = layout.values(d, usage.get(d.id, IDLE))
            labels_of = layout.labels(name, d)
            for family, labels, value in zip(families, labels_of, values, strict=True):
                if value is not None:
                    family.add(labels, value)

    @staticmethod
    def _pod_rows(columns: Sequence[PodColumn], families: Sequence[Family], alloc: PodAllocation) -> None:
        for labels, values in pod_series(columns, alloc):
            for family, value in zip(families, values, strict=True):
                family.add(labels, value)

    def _mig_instances(self, alloc: PodAllocation, info: Family, legacy: Family | None) -> None:
        """One series per MIG reservation the device plugin realised (runtime identity set)."""
        node = self.state.nodes.get(alloc.node)
        if node is None:
            return
        indexes = {d.id: str(d.index) for d in node.devices}
        for a in alloc.mig:
            idx = indexes.get(a.gpu_uuid)
            if not a.mig_uuid or idx is None:
                continue
            info.add(
                (alloc.node, a.gpu_uuid, idx, a.mig_uuid, a.profile, str(a.gpu_instance_id),
                 str(a.compute_instance_id), str(a.placement.start), str(a.placement.size), ZONE),
                1.0,
            )
            if legacy is not None:
                legacy.add((alloc.node, a.gpu_uuid, idx, f"{a.profile}-{a.gpu_instance_id}", ZONE), 1.0)


def describe(legacy: bool = False) -> list[MetricDescriptor]:
    """The extender's metric descriptors, declared in the order ``Extender`` declares them
    (docs/metrics.md); the scrape-time state families come last (a scrape serves them first: they
    are rendered beside the registry, not registered on it)."""
    registry = DescribingRegistry()
    build_info("scheduler", registry)
    SchedulerMetrics(registry)
    tracing_metrics(registry)
    kube_metrics(registry)
    listener_metrics(registry)
    return [*registry.descriptors(), *describe_families(declared_metric(f) for f in state_families(legacy))]
