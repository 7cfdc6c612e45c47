"""The cached text renderer writes exactly what prometheus_client writes for the same families: every
family the monitor declares, on both of its paths (rows for ``collect()``, kept container lines for a
rendered scrape)."""

from __future__ import annotations

from collections.abc import Iterator

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as om_latest
from prometheus_client.parser import text_string_to_metric_families

from hami.core.nvml import RemappedRows, RetiredPages
from hami.core.serve import families as serve_families
from hami.core.serve.families import PIECE, Family, TextRenderer, go_float, to_metric
from hami.exporter.attribution import ContainerView, MigView, PodLabels, UnlimitedView
from hami.exporter.container_text import ContainerText
from hami.exporter.driver import SOURCES
from hami.exporter.exposition import declarations, scrape_families
from hami.exporter.families import CONTAINER, GPU, KERNEL_AGE, container_rows
from hami.exporter.reconcile import KINDS
from hami.exporter.region import reasons
from hami.exporter.region.parse import DeviceUsage
from hami.exporter.view import Counters, DriverUsage, DriverView, HostDevice, MigIdentity, NodeView

# Label values with everything the format escapes, plus non-ASCII and empty strings.
text = st.text(alphabet=st.sampled_from(['a', 'Z', '0', '-', '"', "\\", "\n", " ", "é", "漢", "{", "}", "="]),
               max_size=8)
count = st.one_of(st.integers(0, 2**64 - 1), st.integers(-(2**31), 2**31))
number = st.one_of(count, st.floats(allow_nan=True, allow_infinity=True))


def device(index: int) -> st.SearchStrategy[DeviceUsage]:
    return st.builds(
        DeviceUsage, index=st.just(index), uuid=text, limit_bytes=count, sm_limit_percent=count,
        used_bytes=count, context_bytes=count, module_bytes=count, buffer_bytes=count,
        offset_bytes=count, sm_util_percent=count, over_limit=st.booleans(), sm_util_sum=count,
    )


containers = st.builds(
    ContainerView,
    namespace=text, pod=text, container=text,
    devices=st.integers(0, 3).flatmap(lambda n: st.tuples(*(device(i) for i in range(n)))),
    processes=count, last_kernel_time=st.integers(0, 2_000_000_000), started=st.booleans(),
)
hosts = st.builds(
    HostDevice, index=st.integers(0, 15), uuid=text, type=text,
    memory_used=st.none() | count, memory_total=st.none() | count, util_gpu=st.none() | count,
    util_memory=st.none() | count, temperature=st.none() | count,
    power_watts=st.none() | st.floats(allow_nan=False), ecc_corrected=st.none() | count,
    ecc_uncorrected=st.none() | count, xid_errors=st.integers(0, 100), healthy=st.booleans(),
    temperature_slowdown=st.none() | count, clock_event_reasons=st.none() | st.integers(0, 2**16),
    retired=st.none() | st.builds(RetiredPages, single_bit=count, double_bit=count, pending=st.booleans()),
    remapped=st.none() | st.builds(RemappedRows, correctable=count, uncorrectable=count,
                                   pending=st.booleans(), failure=st.booleans()),
    migs=st.lists(st.builds(MigIdentity, uuid=text, profile=text, gpu_instance_id=st.integers(0, 14),
                            compute_instance_id=st.integers(0, 7)), max_size=2).map(tuple),
)
label_names = st.sampled_from(["label_app", "label_team", "label_a_b", "label_x"])
pod_labels = st.builds(
    PodLabels, namespace=text, pod=text,
    labels=st.dictionaries(label_names, text, max_size=3).map(lambda d: tuple(sorted(d.items()))),
)
views = st.builds(
    NodeView, node=text, now=st.floats(0, 2e9),
    hosts=st.lists(hosts, max_size=3).map(tuple),
    containers=st.lists(containers, max_size=4).map(tuple),
    pod_labels=st.lists(pod_labels, max_size=3).map(tuple),
    migs=st.lists(st.builds(MigView, namespace=text, pod=text, container=text,
                            vdevice_index=st.integers(0, 15), device_uuid=text, mig_uuid=text, profile=text,
                            gpu_instance_id=st.integers(0, 14), compute_instance_id=st.integers(0, 7)),
                  max_size=2).map(tuple),
    regions=st.dictionaries(st.sampled_from(["ok", "initialising", "skipped"]), st.integers(0, 9)),
    skipped=st.dictionaries(st.sampled_from(reasons.ALL), st.integers(0, 9)),
    inconsistencies=st.dictionaries(st.sampled_from(KINDS), st.integers(0, 9)),
    unlimited=st.lists(st.builds(UnlimitedView, namespace=text, pod=text, container=text, reason=text,
                                 processes=count), max_size=2).map(tuple),
    driver=st.builds(
        DriverView,
        usage=st.lists(st.builds(DriverUsage, namespace=text, pod=text, container=text,
                                 vdevice_index=st.integers(0, 3), device_uuid=text,
                                 source=st.sampled_from(SOURCES), soft_limit=count, hard_limit=count,
                                 used=count), max_size=3).map(tuple),
        sources=st.none() | st.dictionaries(st.sampled_from(SOURCES), text),
    ),
)
tallies = st.dictionaries(st.sampled_from(reasons.ALL), st.integers(0, 10**6))


def build(view: NodeView, legacy: bool, skips: dict[str, int] | None = None,
          text: ContainerText | None = None) -> list[Family]:
    """Every family of a scrape of ``view``, as the collector builds it (``text``: the rendered path's)."""
    return scrape_families(view, Counters(skips or {}, {"nvmlDeviceGetPowerUsage": 3}), legacy, text)


class Fixed:
    def __init__(self, fams: list[Family]) -> None:
        self.fams = fams

    def collect(self) -> Iterator[Metric]:
        return iter([to_metric(f) for f in self.fams])


def reference(fams: list[Family], openmetrics: bool = False) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(fams))
    if openmetrics:
        return om_latest(registry).removesuffix(b"# EOF\n")
    return generate_latest(registry)


def parsed(body: bytes) -> list[tuple[str, str, str, list[tuple[str, tuple[tuple[str, str], ...], str]]]]:
    # values compared as text so that NaN equals NaN
    return [
        (f.name, f.type, f.documentation,
         [(s.name, tuple(sorted(s.labels.items())), repr(s.value)) for s in f.samples])
        for f in text_string_to_metric_families(body.decode())
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=views, second=views, legacy=st.booleans(), skips=tallies)
def test_renderer_matches_collector_path(first: NodeView, second: NodeView, legacy: bool,
                                         skips: dict[str, int]) -> None:
    renderer = TextRenderer()
    for view in (first, second, first):  # a warm cache, then identities that changed, then back
        fams = build(view, legacy, skips)
        body = b"".join(renderer.render(fams))
        expected = reference(fams)
        assert parsed(body) == parsed(expected)
        assert body == expected
        assert b"".join(renderer.render(fams, openmetrics=True)) == reference(fams, openmetrics=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=views, second=views, legacy=st.booleans(), skips=tallies)
def test_rendered_path_matches_the_collector_path(first: NodeView, second: NodeView, legacy: bool,
                                                  skips: dict[str, int]) -> None:
    """Every family, the container ones from the lines ``ContainerText`` keeps: the bytes
    prometheus_client writes for the rows ``collect()`` yields."""
    text, renderer = ContainerText(), TextRenderer()
    for view in (first, second, second, first):  # cold, changed, unchanged, changed back
        expected = build(view, legacy, skips)
        fams = build(view, legacy, skips, text)
        assert b"".join(renderer.render(fams)) == reference(expected)
        assert b"".join(renderer.render(fams, openmetrics=True)) == reference(expected, openmetrics=True)


@given(view=views, legacy=st.booleans())
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_scrape_yields_the_declared_families_in_their_order(view: NodeView, legacy: bool) -> None:
    """What describe() reports is what a scrape writes, in the same order; the MIG and pod-label
    families only where the node has series of them."""
    names = [f.name for f in build(view, legacy)]
    declared = [d.name for d in declarations(legacy, pod_labels=True)]
    optional = {"hami_mig_device_info", "MigInfo", "hami_pod_labels"}
    assert names == [n for n in declared if n not in optional or n in names]
    assert ("hami_mig_device_info" in names) == bool(view.migs)
    assert ("hami_pod_labels" in names) == bool(view.pod_labels)


def _ctr(pod: str, uuid: str = "GPU-1", used: int = 5, last_kernel: int = 0) -> ContainerView:
    dev = DeviceUsage(0, uuid, 1 << 30, 100, used, 1, 1, 1, 0, 3)
    return ContainerView("ns", pod, "main", (dev,), 1, last_kernel, True)


def test_container_text_follows_values_and_identities() -> None:
    text, renderer = ContainerText(), TextRenderer()
    steps = [
        NodeView("n1", 100.0, containers=(_ctr("a"), _ctr("b", last_kernel=40))),
        # a's memory grows (its lines change), b's kernel ages with the clock alone
        NodeView("n1", 160.5, containers=(_ctr("a", used=7 << 30), _ctr("b", last_kernel=40))),
        # b goes, c comes (another escaping), a twice (a repeated identity renders twice)
        NodeView("n1", 161.0, containers=(_ctr("a"), _ctr("c", 'GPU-"2"'), _ctr("a", used=9))),
    ]
    bodies = []
    for view in steps:
        body = b"".join(renderer.render(build(view, False, text=text)))
        assert body == reference(build(view, False))
        bodies.append(body.decode())
    assert 'hami_vgpu_memory_used_bytes{container="main",device_uuid="GPU-1",namespace="ns",node="n1",' \
        'pod="a",vdevice_index="0",zone="vGPU"} 7.516192768e+09\n' in bodies[1]
    assert 'pod="b",vdevice_index="0",zone="vGPU"} 120.5\n' in bodies[1]
    assert 'pod="b"' not in bodies[2] and 'device_uuid="GPU-\\"2\\""' in bodies[2]
    assert bodies[2].count('hami_vgpu_memory_used_bytes{container="main",device_uuid="GPU-1"') == 2
    assert text.cached_devices == 2  # a and c: b's lines are gone


def container_families(view: NodeView) -> list[Family]:
    """The container families' rows alone (``collect()``'s)."""
    fams = GPU.scrape(legacy=False)
    container_rows(view, fams)
    return [fams[d] for d in (*(c.declared for c in CONTAINER), KERNEL_AGE)]


def test_cache_follows_series_identity() -> None:
    renderer = TextRenderer()
    before = NodeView("n1", 0.0, containers=(_ctr("a"), _ctr("b")))
    renderer.render(container_families(before))
    assert renderer.cached_series == 2
    # pod b replaced by c: b's label set is dropped, c's rendered fresh with its own values
    after = NodeView("n1", 0.0, containers=(_ctr("a"), _ctr("c", 'GPU-"2"')))
    body = b"".join(renderer.render(container_families(after))).decode()
    assert renderer.cached_series == 2
    assert 'pod="b"' not in body
    assert 'device_uuid="GPU-\\"2\\"",namespace="ns",node="n1",pod="c"' in body
    assert body.encode() == reference(container_families(after))


def test_a_large_body_comes_in_pieces_that_join_to_the_reference() -> None:
    """Pieces end between lines, so a multi-byte label value is never split."""
    fam = Family("hami_big", "gauge", "many series", ("pod",))
    for i in range(3 * PIECE // 20):
        fam.add((f"pod-é-{i}",), i)
    body = TextRenderer().render([fam])
    assert len(body) >= 3 and all(len(piece) >= PIECE for piece in body[:-1])
    assert b"".join(body) == reference([fam])


edges = [0, 1, 999_999, 1_000_000, 1_234_567, 10**15, 2**53 - 1, 2**53, 2**53 + 1, 10**16, 2**64 - 1, -1,
         -(10**7)]


@settings(max_examples=400, deadline=None)
@given(value=st.one_of(st.sampled_from(edges), st.integers(0, 2**53), st.integers(-(2**70), 2**70)))
def test_integers_are_written_as_go_float_writes_them(value: int) -> None:
    assert serve_families.number(value) == go_float(value)
    assert serve_families.number(value) == go_float(value)  # remembered, the same
