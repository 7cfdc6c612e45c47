"""serve_metrics(exposition=...): a component's own text on plain scrapes, its metrics otherwise."""

import gzip
from collections.abc import Iterable, Iterator

import pytest
import requests
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as om_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.parser import text_string_to_metric_families

from hami.core.serve import Server, build_info, serve_metrics


class Rendered:
    """An exposition whose text is marked, so the test can tell which path answered."""

    def __init__(self) -> None:
        self.renders = 0
        self.collects = 0

    def _family(self) -> GaugeMetricFamily:
        fam = GaugeMetricFamily("hami_own_series", 'own "series"', labels=["pod"])
        fam.add_metric(['a"b'], 2)
        return fam

    def render(self, openmetrics: bool) -> list[bytes]:
        self.renders += 1
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        self.collects -= 1  # the line below is the rendering, not a general-path collect
        if openmetrics:
            return [b"# rendered\n", om_latest(registry).removesuffix(b"# EOF\n")]
        return [b"# rendered\n", generate_latest(registry)]  # pieces: served in order

    def collect(self) -> Iterable[Metric]:
        self.collects += 1
        return [self._family()]


@pytest.fixture
def served() -> Iterator[tuple[Server, Rendered]]:
    registry = CollectorRegistry()
    Counter("hami_test_events_total", "test counter", registry=registry).inc(3)
    build_info("monitor", registry)
    own = Rendered()
    srv = serve_metrics("127.0.0.1:0", registry, exposition=own)
    yield srv, own
    srv.stop()


def test_plain_scrape_serves_rendered_text_with_the_registry(served: tuple[Server, Rendered]) -> None:
    srv, own = served
    r = requests.get(f"{srv.url}/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert r.headers["Content-Encoding"] == "gzip"  # requests accepts gzip; the body arrives decoded
    assert r.text.startswith("# rendered\n")
    fams = {f.name: f for f in text_string_to_metric_families(r.text)}
    assert fams["hami_own_series"].samples[0].labels == {"pod": 'a"b'}
    assert fams["hami_test_events"].samples[0].value == 3
    assert "hami_build_info" in fams and "process_resident_memory_bytes" in fams
    assert (own.renders, own.collects) == (1, 0)

    raw = requests.get(f"{srv.url}/metrics", headers={"Accept-Encoding": "identity"}, timeout=10, stream=True)
    body = raw.raw.read()
    assert "Content-Encoding" not in raw.headers and body.startswith(b"# rendered\n")
    with pytest.raises(OSError):
        gzip.decompress(body)


# What Prometheus 2.42 (Debian's) sends by default.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


@pytest.mark.parametrize("accept", [PROMETHEUS_ACCEPT, "application/openmetrics-text"])
def test_openmetrics_is_rendered_with_one_eof(served: tuple[Server, Rendered], accept: str) -> None:
    srv, own = served
    r = requests.get(f"{srv.url}/metrics", headers={"Accept": accept}, timeout=10)
    assert r.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert r.text.startswith("# rendered\n") and r.text.count("# EOF") == 1 and r.text.endswith("# EOF\n")
    names = {f.name for f in om_families(r.text.removeprefix("# rendered\n"))}
    assert {"hami_own_series", "hami_test_events", "hami_build_info"} <= names
    assert (own.renders, own.collects) == (1, 0)


@pytest.mark.parametrize(
    "accept",
    [
        "application/openmetrics-text; version=1.0.0; escaping=dots",
        "text/plain; version=1.0.0; escaping=underscores",
    ],
)
def test_other_formats_take_the_collector_path(served: tuple[Server, Rendered], accept: str) -> None:
    srv, own = served
    r = requests.get(f"{srv.url}/metrics", headers={"Accept": accept}, timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith(accept.split(";", maxsplit=1)[0])
    assert "# rendered" not in r.text and "hami" in r.text and "build" in r.text and "own" in r.text
    assert (own.renders, own.collects) == (0, 1)


def test_filters_and_other_methods_take_the_collector_path(served: tuple[Server, Rendered]) -> None:
    srv, own = served
    r = requests.get(f"{srv.url}/metrics", params={"name[]": "hami_test_events_total"}, timeout=10)
    assert "# rendered" not in r.text and "hami_test_events_total 3.0" in r.text
    assert "hami_own_series" not in r.text and "hami_build_info" not in r.text
    r = requests.get(f"{srv.url}/metrics", params={"name[]": "hami_own_series"}, timeout=10)
    assert [f.name for f in text_string_to_metric_families(r.text)] == ["hami_own_series"]
    assert requests.post(f"{srv.url}/metrics", timeout=10).status_code == 405
    assert own.renders == 0


class Large:
    """A body of many pieces with text that compresses unevenly (distinct label values)."""

    def __init__(self) -> None:
        self.pieces = [
            "".join(f'hami_big{{node="n{i}",piece="{p}"}} {i * p}.0\n' for i in range(3000)).encode()
            for p in range(5)
        ]

    def render(self, openmetrics: bool) -> list[bytes]:
        return self.pieces

    def collect(self) -> Iterable[Metric]:
        return []


def test_gzip_body_is_one_member_that_decompresses_to_the_identity_body() -> None:
    """The compressed scrape (what Prometheus asks for) carries the same bytes as the plain one:
    a single gzip member whose CRC and length Python's gzip checks."""
    registry = CollectorRegistry()
    Counter("hami_test_events_total", "test counter", registry=registry).inc(3)
    own = Large()
    srv = serve_metrics("127.0.0.1:0", registry, exposition=own)
    try:
        r = requests.get(f"{srv.url}/metrics", headers={"Accept-Encoding": "gzip"}, timeout=10, stream=True)
        packed = r.raw.read(decode_content=False)
        plain = requests.get(f"{srv.url}/metrics", headers={"Accept-Encoding": "identity"}, timeout=10,
                             stream=True).raw.read()
    finally:
        srv.stop()
    assert r.headers["Content-Encoding"] == "gzip" and int(r.headers["Content-Length"]) == len(packed)
    assert packed[:3] == b"\x1f\x8b\x08" and len(packed) < len(plain) // 5
    body = gzip.decompress(packed)
    rendered = b"".join(own.pieces)
    assert body.startswith(rendered) and plain.startswith(rendered)
    # the registry's part follows in both (its own figures move between the two requests)
    assert [f.name for f in text_string_to_metric_families(body[len(rendered):].decode())] == [
        f.name for f in text_string_to_metric_families(plain[len(rendered):].decode())
    ]
