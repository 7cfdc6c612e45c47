"""Metric descriptors from a registry: names as exposed, labels of childless metrics, order."""

from collections.abc import Iterator

from prometheus_client import Counter, Gauge, Histogram, Info, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from hami.core.serve.describe import DescribingRegistry, MetricDescriptor, describe_families


class Scrape(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from self.describe()

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("g_bytes", "a gauge", labels=["node", "device_uuid"])
        yield CounterMetricFamily("c", "a counter", labels=["reason"])


def test_wrappers_and_custom_collectors_in_registration_order() -> None:
    reg = DescribingRegistry()
    Counter("req", "requests", ["code", "method"], registry=reg)
    Histogram("lat_seconds", "latency", registry=reg)
    Gauge("up", "up", registry=reg)
    Info("build", "build", ["version"], registry=reg)
    reg.register(Scrape())
    ProcessCollector(registry=reg)  # no describe(): left out
    assert reg.descriptors() == [
        MetricDescriptor("req_total", "counter", ("code", "method"), "requests"),
        MetricDescriptor("lat_seconds", "histogram", (), "latency"),
        MetricDescriptor("up", "gauge", (), "up"),
        MetricDescriptor("build_info", "info", ("version",), "build"),
        MetricDescriptor("g_bytes", "gauge", ("node", "device_uuid"), "a gauge"),
        MetricDescriptor("c_total", "counter", ("reason",), "a counter"),
    ]


def test_it_is_a_real_registry() -> None:
    reg = DescribingRegistry()
    Counter("x", "x", registry=reg).inc()
    assert reg.get_sample_value("x_total") == 1.0


def test_describe_families() -> None:
    fams = [GaugeMetricFamily("a", "help a", labels=["l"]), CounterMetricFamily("b", "help b")]
    assert describe_families(fams) == [
        MetricDescriptor("a", "gauge", ("l",), "help a"),
        MetricDescriptor("b_total", "counter", (), "help b"),
    ]
