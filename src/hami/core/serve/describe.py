"""Metric descriptors (name, type, labels, help) of what a daemon registers, without running it.

``docs/metrics.md`` is generated from these and tests compare them with the metrics contract, so
each component declares its families once, in code. A ``DescribingRegistry`` is a real
``CollectorRegistry`` that also remembers every collector registered on it; components build on it
with the same declaration code their daemon runs. Scrape-time collectors must implement
``describe()`` returning their families without samples.

prometheus-client keeps the label names of a metric without children only in ``_labelnames``
(on the wrapper classes and on the ``*MetricFamily`` classes alike); reading it here is the one
place the project relies on that attribute, and ``tests/core/test_describe.py`` pins it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

# Suffix the exposition adds to a family's name, by type (OpenMetrics and text format alike).
_SUFFIX = {"counter": "_total", "info": "_info"}


@dataclass(frozen=True)
class MetricDescriptor:
    name: str  # the exposed name: counters end in _total, info families in _info
    type: str  # counter, gauge, histogram, summary, info, stateset, unknown
    labels: tuple[str, ...]
    help: str


def _descriptor(metric: Metric, labels: Iterable[str]) -> MetricDescriptor:
    name = metric.name + _SUFFIX.get(metric.type, "")
    return MetricDescriptor(name, metric.type, tuple(labels), metric.documentation)


def describe_families(families: Iterable[Metric]) -> list[MetricDescriptor]:
    """Descriptors of metric families (``GaugeMetricFamily`` and friends) built by a collector."""
    return [_descriptor(m, getattr(m, "_labelnames", ())) for m in families]


class DescribingRegistry(CollectorRegistry):
    """A registry that keeps its collectors in order so that they can be described."""

    def __init__(self) -> None:
        super().__init__()
        self.collectors: list[Collector] = []

    def register(self, collector: Collector) -> None:
        super().register(collector)
        self.collectors.append(collector)

    def descriptors(self) -> list[MetricDescriptor]:
        """Every described family, in registration order; collectors without ``describe()``
        (prometheus-client's process, platform and GC collectors) are left out."""
        out: list[MetricDescriptor] = []
        for collector in self.collectors:
            describe = getattr(collector, "describe", None)
            if describe is None:
                continue
            # a wrapper (Counter, Gauge, ...) holds the label names; a custom collector's
            # families carry their own
            wrapper_labels = getattr(collector, "_labelnames", None)
            for metric in describe():
                labels = wrapper_labels if wrapper_labels is not None else getattr(metric, "_labelnames", ())
                out.append(_descriptor(metric, labels))
        return out
