"""A catalogue's declarations decide what a scrape writes: which families, in which order, and what
describe() reports of them."""

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from hami.core.serve.families import Catalogue, Scrape, TextRenderer, declared_metric, to_metric


def _catalogue() -> Catalogue:
    c = Catalogue()
    c.gauge("b_gauge", "second name, declared first", ("pod",))
    c.counter("a_events", "a counter", ("reason",))
    c.gauge("OldName", "a legacy family", ("pod",), legacy=True)
    c.info("c_labels", "only with series", ("pod",), sparse=True)
    return c


def _body(scrape: Scrape) -> bytes:
    fams = scrape.families()

    class Fixed:
        def collect(self) -> Iterator[Metric]:
            return iter([to_metric(f) for f in fams])

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())
    expected = generate_latest(registry)
    assert b"".join(TextRenderer().render(fams)) == expected
    return bytes(expected)


def test_a_scrape_writes_its_families_in_declaration_order() -> None:
    catalogue = _catalogue()
    gauge, events, _old, _labels = catalogue
    scrape = catalogue.scrape(legacy=False)
    scrape[events].add(("x",), 2)
    scrape[gauge].add(("p",), 1.5)
    body = _body(scrape).decode()
    assert body.index("# HELP b_gauge") < body.index("# HELP a_events_total")
    assert 'b_gauge{pod="p"} 1.5\n' in body and 'a_events_total{reason="x"} 2.0\n' in body
    assert "OldName" not in body and "c_labels" not in body  # legacy off; sparse without series


def test_legacy_and_sparse_families_appear_when_due() -> None:
    catalogue = _catalogue()
    _gauge, _events, old, labels = catalogue
    scrape = catalogue.scrape(legacy=True)
    assert scrape.get(old) is not None
    scrape[labels].add(("p", "web"), 1, ("pod", "label_app"))
    body = _body(scrape).decode()
    assert "# TYPE OldName gauge" in body  # a legacy family without series still has its header
    assert 'c_labels_info{label_app="web",pod="p"} 1.0\n' in body
    assert catalogue.scrape(legacy=False).get(old) is None


def test_describe_reports_every_declaration_with_its_labels() -> None:
    catalogue = _catalogue()
    assert [d.name for d in catalogue.declared(legacy=False)] == ["b_gauge", "a_events", "c_labels"]
    metric = declared_metric(next(iter(catalogue)))
    assert (metric.name, metric.type) == ("b_gauge", "gauge")
    assert metric.documentation == "second name, declared first"


def test_catalogues_join_in_order() -> None:
    first, second = Catalogue(), Catalogue()
    x = first.gauge("x", "x")
    y = second.gauge("y", "y")
    assert list(Catalogue(first, second)) == [x, y]
