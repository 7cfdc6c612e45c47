"""The extender's per-device, per-pod and per-node series: their labels and values (from the
declarations in ``.families``), and their text kept between scrapes.

``StateCollector`` (``.collector``) reads them on both paths: as ``Family`` rows for ``collect()``,
and through ``SeriesText`` for a rendered scrape. ``SeriesText`` keeps each node's
per-device lines and each pod's per-container lines as UTF-8, redone when a reservation changes
(the usage index tells it, under the state lock, from the first rendered scrape on) or the register
pass replaces a node's ``NodeState``, and each node's scheduler lines (handshake age, lock,
schedulable) per node and reason: a scrape, even right after a burst of binds, joins bytes instead
of formatting lines (the cache holds about one body's worth). The cost moved into each change is
a little CPU per reservation, measured in docs/design/extender-performance.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

from hami.core.devices import DeviceInfo
from hami.core.serve.families import Family, Labels, label_set, number, sample_name
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.engine.usage import PodAllocation
from hami.scheduler.extender.families import (
    DeviceColumn,
    PodColumn,
    Use,
    device_columns,
    pod_columns,
    pod_labels,
)
from hami.scheduler.extender.schedulable import SCHEDULABLE
from hami.scheduler.extender.state import ClusterState

IDLE: Use = (0, 0, 0)
_LOCKED = "\0locked"  # the key of a node's lock-held line among its reasons' (no reason has a NUL)


class DeviceLayout:
    """The per-device families' label values and values of one device, read from their columns.
    Columns share a few label sources (``_base``...): each is called once per device."""

    def __init__(self, columns: Sequence[DeviceColumn]) -> None:
        self.columns = tuple(columns)
        self._sources = tuple(dict.fromkeys(c.labels for c in columns))
        self._source_of = tuple(self._sources.index(c.labels) for c in columns)
        self._values = tuple(c.value for c in columns)

    def labels(self, name: str, d: DeviceInfo) -> tuple[Labels, ...]:
        """One device's label values in each column's family."""
        sets = [source(name, d) for source in self._sources]
        return tuple([sets[i] for i in self._source_of])

    def values(self, d: DeviceInfo, use: Use) -> tuple[float | None, ...]:
        """One device's value in each column's family; None where it has no series."""
        return tuple([value(d, use) for value in self._values])


def pod_series(
    columns: Sequence[PodColumn], alloc: PodAllocation,
) -> Iterator[tuple[Labels, tuple[int, ...]]]:
    """Per reserved device of the pod: its labels, and its value in each of ``columns``."""
    for share in alloc.shares:
        if share.uuid:
            values = tuple([c.value(share) for c in columns])
            yield pod_labels(alloc.namespace, alloc.node, alloc.name, share), values


class NodeText(NamedTuple):
    """A node's per-device lines between scrapes. Plain tuples of strings and ints, not an object
    per device: the cyclic GC untracks such tuples after one pass, so 8,000 devices' text does not
    add to every later young-generation pass."""

    node: NodeState
    uses: tuple[Use, ...]  # per device of ``node.devices``
    heads: tuple[tuple[str, ...], ...]  # per device, per family ``name{labels} ``
    lines: tuple[tuple[str, ...], ...]  # per device, per family its line
    text: tuple[bytes, ...]  # per family: every device's line, encoded once


class PodText(NamedTuple):
    alloc: PodAllocation
    text: tuple[bytes, ...]  # one chunk per ``pod_columns`` family, encoded once


class SeriesText:
    """The rendered path's text, kept between scrapes."""

    def __init__(self, state: ClusterState, legacy: bool) -> None:
        self.state = state
        self.nodes: dict[str, NodeText] = {}  # guarded by the state lock
        self._pods: dict[str, PodText] = {}
        self._usage_seq = -1  # ``state.usage.seq`` when ``nodes`` was last brought up to date
        self.devices = DeviceLayout(device_columns(legacy))
        self.pods = pod_columns(legacy)
        self._pod_families = tuple(c.declared for c in self.pods)
        state.usage.listeners.append(self._usage_changed)
        # Outside the state lock: two scrapes at once may each replace this with their own; every
        # entry is keyed by all its text depends on, so a race costs a re-render, never a wrong line.
        # ("", node) -> the age line's head; (reason or _LOCKED, node) -> the whole line
        self._node_heads: dict[tuple[str, str], str] = {}

    def node_series(
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

    def node(self, name: str, node: NodeState) -> NodeText:
        """The node's per-device lines, rendered here only for a new ``NodeState`` from the
        register pass. Under the state lock."""
        cached = self.nodes.get(name)
        if cached is None or cached.node is not node:
            cached = self._node_lines(name, node, self.state.usage.node_usage(name), cached)
        return cached

    def pod(self, alloc: PodAllocation) -> tuple[bytes, ...]:
        """The pod's lines, one chunk per ``pod_columns`` family. Under the state lock."""
        held = self._pods.get(alloc.uid)
        if held is None or held.alloc is not alloc:  # before the first rendered scrape
            held = self._pods[alloc.uid] = PodText(alloc, self._pod_lines(alloc))
        return held.text

    def _usage_changed(self, old: PodAllocation | None, new: PodAllocation | None) -> None:
        """A reservation added, replaced or removed (under the state lock): its pod's lines and
        its nodes' device lines are redone now, so a scrape after a burst of binds only joins text.
        Nothing until the first rendered scrape (a replica nobody scrapes pays nothing)."""
        if self._usage_seq < 0:
            return
        if old is not None:
            self._pods.pop(old.uid, None)
        if new is not None:
            self._pods[new.uid] = PodText(new, self._pod_lines(new))
        self.refresh_nodes()

    def refresh_nodes(self) -> None:
        """Redo the device lines of every node whose usage changed since the last call (of all
        nodes when the usage index's log no longer reaches back that far). Under the state lock."""
        usage, nodes, text = self.state.usage, self.state.nodes, self.nodes
        touched = usage.touched_since(self._usage_seq)
        for name in nodes if touched is None else set(touched):
            node = nodes.get(name)
            if node is None:
                text.pop(name, None)
            else:
                text[name] = self._node_lines(name, node, usage.node_usage(name), text.get(name))
        self._usage_seq = usage.seq

    def _node_lines(
        self, name: str, node: NodeState, usage: dict[str, Use], cached: NodeText | None,
    ) -> NodeText:
        """The node's per-device lines: a device's are redone only when its usage changed, and its
        label sets only with a new ``NodeState``."""
        if cached is not None and cached.node is not node:
            cached = None
        devices = node.devices
        uses = tuple([usage.get(d.id, IDLE) for d in devices])
        if cached is not None and cached.uses == uses:
            return cached
        layout = self.devices
        columns = layout.columns
        heads = cached.heads if cached is not None else tuple(
            tuple(
                f"{sample_name(c.declared)}{label_set(c.declared.labels, labels)} "
                for c, labels in zip(columns, layout.labels(name, d), strict=True)
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
        ]) if lines else (b"",) * len(columns)
        return NodeText(node, uses, heads, tuple(lines), chunks)

    def _device_text(self, heads: tuple[str, ...], d: DeviceInfo, use: Use) -> tuple[str, ...]:
        """One device's line in each ``device_columns`` family (``""`` where it has no series)."""
        return tuple([
            "" if value is None else f"{head}{number(value)}\n"
            for head, value in zip(heads, self.devices.values(d, use), strict=True)
        ])

    def _pod_lines(self, alloc: PodAllocation) -> tuple[bytes, ...]:
        """``pod_series`` as text, one chunk per family (families with the same label names share
        each label set)."""
        families = self._pod_families
        lines: list[list[str]] = [[] for _ in families]
        for labels, values in pod_series(self.pods, alloc):
            sets: dict[Labels, str] = {}
            for out, family, value in zip(lines, families, values, strict=True):
                text = sets.get(family.labels)
                if text is None:
                    text = sets[family.labels] = label_set(family.labels, labels)
                out.append(f"{sample_name(family)}{text} {number(value)}\n")
        return tuple(["".join(out).encode("utf-8") for out in lines])
