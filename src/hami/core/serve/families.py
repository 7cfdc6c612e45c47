"""Metric families declared once, as plain data, and a text renderer with cached label sets.

A component declares each scrape-time family once, as a ``Declared`` (name, type, help, label
names) in its ``Catalogue``, beside where its value comes from (docs/design/metric-families.md).
Each scrape makes a ``Scrape`` of the catalogue, one ``Family`` per declaration, and fills their rows
(the monitor's per-container series, the extender's per-device ones). They reach Prometheus two
ways, derived from those same rows, which must agree sample for sample
(tests/exporter/test_exposition_fast.py, tests/scheduler/test_collector_exposition.py):

- ``to_metric``: a ``prometheus_client`` metric, for the collector path (OpenMetrics, ``name[]``).
- ``TextRenderer.render``: the bytes ``generate_latest`` (text 0.0.4) or the OpenMetrics one would
  write for the same families, without their per-line cost: the ``{...}`` label set of a series
  is escaped and sorted once and reused between scrapes while the series' identity (label names
  and values) persists; an identity absent from a scrape is dropped from the cache, so it cannot
  grow without bound.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.openmetrics.exposition import escape_label_name, escape_metric_name
from prometheus_client.utils import floatToGoString as _go_float

Kind = Literal["gauge", "counter", "info"]
go_float: Callable[[float], str] = _go_float  # Go's float formatting, as every exposition writes it
Labels = tuple[str, ...]
Row = tuple[Labels, Labels, float]  # label names, label values (same order), value

# Sample-name suffix and text-format type of each kind (prometheus_client's munging).
_SUFFIX: Final = {"gauge": "", "counter": "_total", "info": "_info"}
_TEXT_TYPE: Final = {"gauge": "gauge", "counter": "counter", "info": "gauge"}


@dataclass(frozen=True, eq=False)  # one object per family: compared and hashed as itself
class Declared:
    """One family as declared: what ``describe()`` reports and every scrape's ``Family`` is made of."""

    name: str  # without the ``_total`` / ``_info`` suffix
    kind: Kind
    help: str
    labels: Labels = ()
    legacy: bool = False  # HAMi's pre-2.9 name: exported only with ``--legacy-metrics``
    sparse: bool = False  # left out of a scrape that has no series of it (not even HELP and TYPE)

    def family(self) -> Family:
        """An empty family of this declaration, for one scrape's rows."""
        return Family(self.name, self.kind, self.help, self.labels)


class Catalogue:
    """A daemon's scrape-time families in exposition order: a declaration made through it joins it,
    so that ``describe()`` and every scrape follow from the declarations alone."""

    def __init__(self, *parts: Catalogue) -> None:
        self._entries: list[Declared] = [d for part in parts for d in part]

    def __iter__(self) -> Iterator[Declared]:
        return iter(self._entries)

    def add(self, declared: Declared) -> Declared:
        self._entries.append(declared)
        return declared

    def gauge(self, name: str, doc: str, labels: Sequence[str] = (), *, legacy: bool = False,
              sparse: bool = False) -> Declared:
        return self.add(Declared(name, "gauge", doc, tuple(labels), legacy, sparse))

    def counter(self, name: str, doc: str, labels: Sequence[str] = (), *, legacy: bool = False) -> Declared:
        return self.add(Declared(name, "counter", doc, tuple(labels), legacy))

    def info(self, name: str, doc: str, labels: Sequence[str] = (), *, sparse: bool = False) -> Declared:
        return self.add(Declared(name, "info", doc, tuple(labels), sparse=sparse))

    def declared(self, legacy: bool) -> list[Declared]:
        """The declarations a daemon exports: the legacy ones only with ``legacy``."""
        return [d for d in self._entries if legacy or not d.legacy]

    def scrape(self, legacy: bool) -> Scrape:
        return Scrape(self.declared(legacy))


class Scrape:
    """One scrape's families, one per declaration: filled by declaration, written in its order."""

    def __init__(self, declared: Iterable[Declared]) -> None:
        self._families = {d: d.family() for d in declared}

    def __getitem__(self, declared: Declared) -> Family:
        return self._families[declared]

    def get(self, declared: Declared) -> Family | None:
        """The family, or None where the scrape leaves its declaration out (a legacy one)."""
        return self._families.get(declared)

    def families(self) -> list[Family]:
        return [f for d, f in self._families.items() if f.rows or f.text or not d.sparse]


@dataclass
class Family:
    name: str  # without the ``_total`` / ``_info`` suffix
    kind: Kind
    help: str
    labels: Labels
    rows: list[Row] = field(default_factory=list)
    # Sample lines rendered ahead (``label_set``, ``number``), written after ``rows`` by ``TextRenderer``
    # only: a component that caches them keeps them for the rendered path alone. Bytes (UTF-8) go
    # into the body as they are: text a component keeps encoded is not encoded again every scrape.
    text: list[str | bytes] = field(default_factory=list)

    def add(self, values: Labels, value: float, names: Labels | None = None) -> None:
        """One series; ``names`` only where a row has its own label names (info families)."""
        self.rows.append((self.labels if names is None else names, values, value))


def to_metric(family: Family) -> Metric:
    if family.text:
        raise ValueError(f"{family.name}: pre-rendered sample lines have no prometheus_client form")
    metric = Metric(family.name, family.help, family.kind)
    sample = family.name + _SUFFIX[family.kind]
    for names, values, value in family.rows:
        metric.add_sample(sample, dict(zip(names, values, strict=True)), value)
    return metric


def declared_metric(declared: Declared) -> Metric:
    """The family without samples but with its label names, for ``describe()``."""
    labels = list(declared.labels)
    if declared.kind == "counter":
        return CounterMetricFamily(declared.name, declared.help, labels=labels)
    if declared.kind == "info":
        return InfoMetricFamily(declared.name, declared.help, labels=labels)
    return GaugeMetricFamily(declared.name, declared.help, labels=labels)


def escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


@functools.lru_cache(maxsize=512)
def _label_order(names: Labels) -> tuple[tuple[str, int], ...]:
    """(escaped name, index of its value) sorted by name; a repeated name keeps its last value,
    as ``dict(zip(names, values))`` does. Label names come from a few fixed tuples."""
    last = {name: i for i, name in enumerate(names)}
    return tuple((escape_label_name(name), last[name]) for name in sorted(last))


def label_set(names: Sequence[str], values: Sequence[str]) -> str:
    """``{a="x",b="y"}`` sorted by name, as generate_latest writes it (``""`` when empty)."""
    if len(names) != len(values):
        raise ValueError(f"{len(names)} label names for {len(values)} values")
    order = _label_order(tuple(names))
    if not order:
        return ""
    return "{" + ",".join(f'{name}="{escape_value(values[i])}"' for name, i in order) + "}"


_INT_TEXT: dict[int, str] = {}  # a few distinct integers (counts, limits, sizes) recur every scrape


def number(value: float) -> str:
    """``go_float(value)``, remembered for integers (floats are not: -0.0 == 0.0)."""
    if type(value) is not int:
        return go_float(value)
    text = _INT_TEXT.get(value)
    if text is None:
        if len(_INT_TEXT) >= 4096:  # bounded: values a scrape never repeats cannot pile up
            _INT_TEXT.clear()
        text = _INT_TEXT[value] = _go_int(value)
    return text


def _go_int(value: int) -> str:
    """``go_float(value)`` for an int, from its digits where the float is exact (below 2**53: the
    float's shortest repr is then the int's digits and ``.0``), without the float's round trip."""
    if not 0 <= value < 1 << 53:
        return go_float(value)
    digits = str(value)
    if len(digits) <= 6:
        return digits + ".0"
    mantissa = f"{digits[0]}.{digits[1:]}0".rstrip("0.")  # as go_float cuts a positional repr
    return f"{mantissa}e+{len(digits) - 1:02d}"


def sample_name(f: Family | Declared) -> str:
    """The name ``f``'s sample lines start with."""
    return _escaped_name(f.name + _SUFFIX[f.kind])


@functools.lru_cache(maxsize=1024)
def _escaped_name(name: str) -> str:
    return escape_metric_name(name)


def _header(f: Family, openmetrics: bool) -> str:
    if openmetrics:  # the family's own name and type; the help escapes quotes too
        name, doc = escape_metric_name(f.name), escape_value(f.help)
        return f"# HELP {name} {doc}\n# TYPE {name} {f.kind}\n"
    name = escape_metric_name(f.name + _SUFFIX[f.kind])
    doc = f.help.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {_TEXT_TYPE[f.kind]}\n"


class TextRenderer:
    """Renders families as text format 0.0.4, or as the body of OpenMetrics 1.0.0 (legacy name
    escaping, no ``# EOF``); concurrent scrapes take turns (the label-set cache is shared).

    The two formats differ only in the HELP/TYPE lines: sample lines and label sets are shared.
    """

    def __init__(self) -> None:
        self._sets: dict[Labels, dict[Labels, str]] = {}  # names -> values -> "{...}"
        self._headers: dict[tuple[str, Kind, str, bool], str] = {}
        self._lock = threading.Lock()

    @property
    def cached_series(self) -> int:
        return sum(len(v) for v in self._sets.values())

    def render(self, families: Iterable[Family], openmetrics: bool = False) -> list[bytes]:
        """The body in pieces (``pieces``), to be sent or compressed one after the other."""
        with self._lock:
            text = self._render(families, openmetrics)
        return pieces(text)

    def _render(self, families: Iterable[Family], openmetrics: bool) -> list[str | bytes]:
        previous, current = self._sets, dict[Labels, dict[Labels, str]]()
        headers: dict[tuple[str, Kind, str, bool], str] = {}
        out: list[str | bytes] = []
        for f in families:
            key = (f.name, f.kind, f.help, openmetrics)
            header = self._headers.get(key) or _header(f, openmetrics)
            headers[key] = header
            out.append(header)
            sample = sample_name(f)
            last: Labels | None = None
            now: dict[Labels, str] = {}
            before: dict[Labels, str] = {}
            for names, values, value in f.rows:
                if names is not last:
                    last = names
                    now = current.setdefault(names, {})
                    before = previous.get(names, {})
                labels = now.get(values)
                if labels is None:
                    labels = before.get(values)
                    if labels is None:
                        labels = label_set(names, values)
                    now[values] = labels
                out.append(f"{sample}{labels} {number(value)}\n")
            out.extend(f.text)
        self._sets, self._headers = current, headers
        return out


PIECE: Final = 1 << 16  # characters per piece of a rendered body


def pieces(text: Sequence[str | bytes]) -> list[bytes]:
    """``text`` joined and encoded in pieces of about ``PIECE`` characters; a bytes item is a piece
    of its own. A body is megabytes: as one buffer (twice: the str, then its bytes) it is fresh
    memory, page faults included, on every scrape, which cost more than formatting the body."""
    out: list[bytes] = []
    run: list[str] = []
    size = 0
    for chunk in text:
        if isinstance(chunk, bytes):
            if run:
                out.append("".join(run).encode("utf-8"))
                run, size = [], 0
            out.append(chunk)
            continue
        run.append(chunk)
        size += len(chunk)
        if size >= PIECE:
            out.append("".join(run).encode("utf-8"))
            run, size = [], 0
    if run:
        out.append("".join(run).encode("utf-8"))
    return out
