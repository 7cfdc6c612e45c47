"""Scrape-time metrics from the caches: node states, handshakes, locks, leadership, allocations.

HAMi's §7.1 families (``zone="vGPU"``, memory in bytes = MiB × 1048576) are always exported; the
pre-2.9 CamelCase names only with ``--legacy-metrics``, also with ``zone`` (HAMi registers the whole
collector through ``WrapRegistererWith({"zone": "vGPU"})``). Everything is read under the state lock
in one pass, so a scrape sees one consistent snapshot.

The families (declared in ``.families``) are plain ``Family`` rows (``hami.core.serve.families``):
``render()`` writes them through the cached ``TextRenderer`` (a plain scrape of 1,000 nodes × 8
GPUs is ~66k series, and the extender holds the GIL while it renders), ``collect()`` yields them as
prometheus_client metrics for every other request; ``hami.core.serve`` picks between the two (its
``Exposition``). The rendered path also keeps each node's per-device lines and each pod's
per-container lines as UTF-8 between scrapes, redone when a reservation changes (the usage index
tells the collector, under the state lock, from the first rendered scrape on) or the register pass
replaces a node's ``NodeState``, and each node's scheduler lines (handshake age, lock,
schedulable) per node and reason: a scrape, even right after a burst of binds, joins bytes instead
of formatting lines (the cache holds about one body's worth). The pending pods and the node locks
come kept up to date by the informer handlers (``ClusterState``). The cost moved into each change
is about 65 µs of CPU per reservation (docs/design/extender-performance.md).
tests/scheduler/test_collector_exposition.py checks it byte for byte against prometheus_client as
reservations come and go.

Section signs (§) refer to docs/design/scheduler.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from hami.core import annotations as ann
from hami.core.codec.nodelock import DEFAULT_TIMEOUT
from hami.core.devices import DeviceInfo
from hami.core.kube.metrics import kube_metrics
from hami.core.serve import build_info, listener_metrics
from hami.core.serve.describe import DescribingRegistry, MetricDescriptor, describe_families
from hami.core.serve.families import (
    Family,
    Labels,
    TextRenderer,
    declared_metric,
    label_set,
    number,
    sample_name,
    to_metric,
)
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.engine.usage import PodAllocation
from hami.scheduler.extender.decisions import BOUND_REASON, DecisionStore
from hami.scheduler.extender.families import (
    MIB,
    ZONE,
    Allocation,
    allocation_families,
    scheduler_families,
    state_families,
)
from hami.scheduler.extender.metrics import SchedulerMetrics
from hami.scheduler.extender.schedulable import SCHEDULABLE, devices_reason, node_reason
from hami.scheduler.extender.state import NODE_STATES, ClusterState, NodeRecord

Use = tuple[int, int, int]  # a device's (slots used, MiB used, cores used)
_IDLE: Use = (0, 0, 0)
_UNLOCKED: Mapping[str, str] = {}  # the annotations ``node_reason`` reads of a node without a lock
_LOCKED = "\0locked"  # the key of a node's lock-held line among its reasons' (no reason has a NUL)


class _NodeText(NamedTuple):
    """A node's per-device lines between scrapes. Plain tuples of strings and ints, not an object
    per device: the cyclic GC untracks such tuples after one pass, so 8,000 devices' text does not
    add to every later young-generation pass."""

    node: NodeState
    uses: tuple[Use, ...]  # per device of ``node.devices``
    heads: tuple[tuple[str, ...], ...]  # per device, per family ``name{labels} ``
    lines: tuple[tuple[str, ...], ...]  # per device, per family its line
    text: tuple[bytes, ...]  # per family: every device's line, encoded once


class _PodText(NamedTuple):
    alloc: PodAllocation
    text: tuple[bytes, ...]  # one chunk per ``_per_pod`` family, encoded once


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
        self._node_text: dict[str, _NodeText] = {}  # guarded by the state lock
        self._pod_text: dict[str, _PodText] = {}
        self._usage_seq = -1  # ``state.usage.seq`` when ``_node_text`` was last brought up to date
        # Only the names and label names of these are read (``_node_lines``, ``_pod_lines``).
        template, legacy_template = allocation_families()
        self._device_families = self._per_device(template, legacy_template)
        self._pod_families = self._per_pod(template, legacy_template)
        state.usage.listeners.append(self._usage_changed)
        # Outside the state lock: two scrapes at once may each replace these with their own; every
        # entry is keyed by all its text depends on, so a race costs a re-render, never a wrong line.
        self._device_reasons: dict[int, tuple[NodeState, str]] = {}  # id(NodeState) -> it, devices_reason
        # ("", node) -> the age line's head; (reason or _LOCKED, node) -> the whole line
        self._node_heads: dict[tuple[str, str], str] = {}

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

    def _scheduler(self, rendered: bool = False) -> tuple[Family, ...]:
        """The extender's own state families. ``rendered``: the per-node series (handshake age,
        lock, schedulable) come as text from label sets kept per node between scrapes; only the
        age's value is formatted every time."""
        leader, synced, pending, states, ages, held, schedulable, size = scheduler_families()
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
            self._node_text_lines(
                handshakes, verdicts, locked, ages=ages, schedulable=schedulable, held=held
            )
        else:
            for name, age in handshakes:
                ages.add((name,), age)
            for reason, name in verdicts:
                schedulable.add((name, reason), 1.0 if reason == SCHEDULABLE else 0.0)
            for name in locked:
                held.add((name,), 1.0)
        return (leader, synced, pending, states, ages, held, schedulable, size)

    def _node_text_lines(
        self, handshakes: list[tuple[str, float]], verdicts: list[tuple[str, str]], locked: list[str],
        *, ages: Family, schedulable: Family, held: Family,
    ) -> None:
        """The per-node families as text: each line's ``name{labels} `` (and the whole line where
        the value is fixed) kept per node and reason while the node is listed."""
        known, lines = self._node_heads, dict[tuple[str, str], str]()
        age_name, verdict_name, held_name = sample_name(ages), sample_name(schedulable), sample_name(held)
        for name, age in handshakes:
            head = known.get(("", name))
            if head is None:
                head = f"{age_name}{label_set(ages.labels, (name,))} "
            lines["", name] = head
            ages.text.append(f"{head}{number(age)}\n")
        for reason, name in verdicts:
            line = known.get((reason, name))
            if line is None:
                value = number(1.0 if reason == SCHEDULABLE else 0.0)
                line = f"{verdict_name}{label_set(schedulable.labels, (name, reason))} {value}\n"
            lines[reason, name] = line
            schedulable.text.append(line)
        for name in locked:
            line = known.get((_LOCKED, name))
            if line is None:
                line = f"{held_name}{label_set(held.labels, (name,))} {number(1.0)}\n"
            lines[_LOCKED, name] = line
            held.text.append(line)
        self._node_heads = lines

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
        ``_usage_changed`` keeps, one bytes piece per family (a scrape at 1,000 nodes × 8 GPUs would
        otherwise format ~66k lines); only a node with a new ``NodeState`` is rendered here."""
        # Integer values stay ints: they render as the same float text, and ``number`` caches it.
        f, legacy = allocation_families()
        per_device = self._per_device(f, legacy)
        nodes: dict[str, _NodeText] = {}
        with self.state.lock:
            usage = self.state.usage
            if rendered:
                self._refresh_nodes()
            for name, node in self.state.nodes.items():
                if not rendered:
                    self._device_rows(per_device, name, node, usage.node_usage(name))
                    continue
                cached = self._node_text.get(name)
                if cached is None or cached.node is not node:  # a new NodeState from the register pass
                    cached = self._node_lines(name, node, usage.node_usage(name), cached)
                nodes[name] = cached
            if nodes:  # one piece per family, joined in C
                columns = zip(*[n.text for n in nodes.values()], strict=True)
                for family, chunks in zip(per_device, columns, strict=True):
                    family.text.append(b"".join(chunks))
            for ns, rname, entry in self.state.quotas.items():
                limit = str(entry.limit) if entry.limit_set else "0"
                f.q_used.add((ns, rname, limit, ZONE), entry.used)
                if entry.limit_set:
                    f.q_limit.add((ns, rname, ZONE), entry.limit)
                if self.legacy:
                    legacy[7].add((ns, rname, limit, ZONE), entry.used)
            per_pod = self._per_pod(f, legacy)
            pod_text, texts = self._pod_text, list[tuple[bytes, ...]]()
            for alloc in usage.pods():
                if alloc.mig:
                    self._mig_instances(alloc, f.mig_info, legacy[10])
                if not rendered:
                    self._pod_rows(per_pod, alloc)
                    continue
                held = pod_text.get(alloc.uid)
                if held is None or held.alloc is not alloc:  # before the first rendered scrape
                    held = pod_text[alloc.uid] = _PodText(alloc, self._pod_lines(alloc))
                texts.append(held.text)
            if texts:
                for family, chunks in zip(per_pod, zip(*texts, strict=True), strict=True):
                    family.text.append(b"".join(chunks))
            if rendered:  # only the nodes this scrape saw: the cache cannot outgrow the cluster
                self._node_text = nodes
        return [*f, *legacy] if self.legacy else list(f)

    def _usage_changed(self, old: PodAllocation | None, new: PodAllocation | None) -> None:
        """A reservation added, replaced or removed (under the state lock): its pod's lines and
        its nodes' device lines are redone now, so a scrape after a burst of binds only joins text.
        Nothing until the first rendered scrape (a replica nobody scrapes pays nothing)."""
        if self._usage_seq < 0:
            return
        if old is not None:
            self._pod_text.pop(old.uid, None)
        if new is not None:
            self._pod_text[new.uid] = _PodText(new, self._pod_lines(new))
        self._refresh_nodes()

    def _refresh_nodes(self) -> None:
        """Redo the device lines of every node whose usage changed since the last call (of all
        nodes when the usage index's log no longer reaches back that far). Under the state lock."""
        usage, nodes, text = self.state.usage, self.state.nodes, self._node_text
        touched = usage.touched_since(self._usage_seq)
        for name in nodes if touched is None else set(touched):
            node = nodes.get(name)
            if node is None:
                text.pop(name, None)
            else:
                text[name] = self._node_lines(name, node, usage.node_usage(name), text.get(name))
        self._usage_seq = usage.seq

    def _per_device(self, f: Allocation, legacy: list[Family]) -> tuple[Family, ...]:
        """The families with one series per device, in ``_device_series`` order."""
        current = (f.split, f.mem_limit, f.core_limit, f.mem_alloc, f.shared, f.core_alloc, f.overview,
                   f.mem_ratio)
        return (*current, *legacy[:7]) if self.legacy else current

    def _per_pod(self, f: Allocation, legacy: list[Family]) -> tuple[Family, ...]:
        """The families with one series per reserved device of a pod, in ``_pod_rows`` order."""
        return (f.v_mem, f.v_core, legacy[8], legacy[9]) if self.legacy else (f.v_mem, f.v_core)

    def _device_labels(self, name: str, d: DeviceInfo) -> tuple[Labels, ...]:
        """One device's label values in each ``_per_device`` family."""
        idx = str(d.index)
        base = (name, d.id, idx, d.type, ZONE)
        cores = (name, d.id, idx, str(d.devcore), d.type, ZONE)
        overview = (name, d.id, idx, str(d.devcore), str(d.devmem), d.type, ZONE)
        out: tuple[Labels, ...] = (base, base, base, cores, base, base, overview, base)
        if self.legacy:
            out += (base, base, cores, base, base, overview, (name, d.id, idx, ZONE))
        return out

    def _device_values(self, d: DeviceInfo, use: Use) -> tuple[float | None, ...]:
        """One device's value in each ``_per_device`` family; None where it has no series."""
        used, umem, ucores = use
        mem, amem = d.devmem * MIB, umem * MIB
        ratio = umem / d.devmem if d.devmem > 0 else None
        out: tuple[float | None, ...] = (d.count, mem, d.devcore, amem, used, ucores, amem, ratio)
        if self.legacy:
            out += (mem, d.devcore, amem, used, ucores, amem, ratio)
        return out

    def _device_rows(
        self, families: Sequence[Family], name: str, node: NodeState, usage: dict[str, Use],
    ) -> None:
        for d in node.devices:
            values = self._device_values(d, usage.get(d.id, _IDLE))
            for family, labels, value in zip(families, self._device_labels(name, d), values, strict=True):
                if value is not None:
                    family.add(labels, value)

    def _node_lines(
        self, name: str, node: NodeState, usage: dict[str, Use], cached: _NodeText | None,
    ) -> _NodeText:
        """The node's per-device lines: a device's are redone only when its usage changed, and its
        label sets only with a new ``NodeState``."""
        if cached is not None and cached.node is not node:
            cached = None
        devices = node.devices
        uses = tuple([usage.get(d.id, _IDLE) for d in devices])
        if cached is not None and cached.uses == uses:
            return cached
        families = self._device_families
        heads = cached.heads if cached is not None else tuple(
            tuple(
                f"{sample_name(family)}{label_set(family.labels, labels)} "
                for family, labels in zip(families, self._device_labels(name, d), strict=True)
            )
            for d in devices
        )
        if cached is None:
            lines = [self._device_text(h, d, u) for h, d, u in zip(heads, devices, uses, strict=True)]
        else:
            kept = zip(heads, devices, uses, cached.uses, cached.lines, strict=True)
            lines = [text if use == old else self._device_text(h, d, use) for h, d, use, old, text in kept]
        chunks = tuple([
            "".join(column).encode("utf-8") for column in zip(*lines, strict=True)
        ]) if lines else (b"",) * len(families)
        return _NodeText(node, uses, heads, tuple(lines), chunks)

    def _device_text(self, heads: tuple[str, ...], d: DeviceInfo, use: Use) -> tuple[str, ...]:
        """One device's line in each ``_per_device`` family (``""`` where it has no series)."""
        return tuple([
            "" if value is None else f"{head}{number(value)}\n"
            for head, value in zip(heads, self._device_values(d, use), strict=True)
        ])

    def _pod_series(self, alloc: PodAllocation) -> Iterator[tuple[Labels, tuple[int, ...]]]:
        """Per reserved device of the pod: its labels, and its value in each ``_per_pod`` family."""
        for share in alloc.shares:
            if share.uuid:
                values = (share.usedmem * MIB, share.usedcores)
                yield (alloc.namespace, alloc.node, alloc.name, "0", share.uuid, ZONE), (
                    values * 2 if self.legacy else values
                )

    def _pod_rows(self, families: Sequence[Family], alloc: PodAllocation) -> None:
        for labels, values in self._pod_series(alloc):
            for family, value in zip(families, values, strict=True):
                family.add(labels, value)

    def _pod_lines(self, alloc: PodAllocation) -> tuple[bytes, ...]:
        """``_pod_rows`` as text, one chunk per family (families with the same label names share
        each label set)."""
        families = self._pod_families
        lines: list[list[str]] = [[] for _ in families]
        for labels, values in self._pod_series(alloc):
            sets: dict[Labels, str] = {}
            for out, family, value in zip(lines, families, values, strict=True):
                text = sets.get(family.labels)
                if text is None:
                    text = sets[family.labels] = label_set(family.labels, labels)
                out.append(f"{sample_name(family)}{text} {number(value)}\n")
        return tuple(["".join(out).encode("utf-8") for out in lines])

    def _mig_instances(self, alloc: PodAllocation, info: Family, legacy: Family) -> None:
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
            if self.legacy:
                legacy.add((alloc.node, a.gpu_uuid, idx, f"{a.profile}-{a.gpu_instance_id}", ZONE), 1.0)


def describe(legacy: bool = False) -> list[MetricDescriptor]:
    """The extender's metric descriptors, declared in the order ``Extender`` declares them
    (docs/metrics.md); the scrape-time state families come last (a scrape serves them first: they
    are rendered beside the registry, not registered on it)."""
    registry = DescribingRegistry()
    build_info("scheduler", registry)
    SchedulerMetrics(registry)
    kube_metrics(registry)
    listener_metrics(registry)
    return [*registry.descriptors(), *describe_families(declared_metric(f) for f in state_families(legacy))]
