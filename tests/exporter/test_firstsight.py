"""The monitor's first sight of a container's region is one span in the pod's trace, made by the
scrape that joins the region to its pod, through the context the bind bound to that pod's UID only
(docs/design/tracing.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import Span
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from hami.core import tracing
from hami.core.codec.pod_devices import decode_pod_devices
from hami.exporter.collector import MonitorCollector
from hami.exporter.discovery import ContainerLister
from hami.exporter.firstsight import SPAN
from hami.testing import builders
from hami.testing.regions import RegionWriter

GPU0 = "GPU-00000000-1111-2222-3333-444444444444"


KEY = "k"


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def spans(registry: CollectorRegistry) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.setup("hami-monitor", tracing.tracing_metrics(registry), key=KEY, exporter=exporter)
    yield exporter
    tracing.shutdown()


def _webhook() -> tuple[Span, str]:
    """The webhook's span and the traceparent it wrote."""
    webhook, annotation = tracing.webhook_span("team")
    tracing.end(webhook)
    assert webhook is not None
    return webhook, annotation[tracing.ANNOTATION].split(";")[0]


def _pod(uid: str, context: str) -> dict[str, Any]:
    annotations = {"hami.io/vgpu-devices-allocated": f"{GPU0},NVIDIA,1024,30:;", tracing.ANNOTATION: context}
    return builders.pod({"name": "main"}, name=f"p-{uid}", namespace="team", uid=uid, annotations=annotations,
                        node_name="node-1", phase="Running")


def _region(root: Path, dirname: str) -> RegionWriter:
    d = root / "containers" / dirname
    d.mkdir(parents=True)
    writer = RegionWriter.create(str(d / "0b1c.cache"), "v1.2")
    writer.initialise([GPU0], limits=[1 << 30], sm_limits=[30])
    return writer


def test_a_region_joined_to_its_pod_is_one_span_in_the_pods_trace(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    webhook, traceparent = _webhook()
    pods: list[dict[str, Any]] = []
    lister = ContainerLister(str(tmp_path))
    collector = MonitorCollector("node-1", lister, lambda: pods, decode_pod_devices)
    writer = _region(tmp_path, "uid-a_main")
    try:
        lister.update(None)
        collector.view()  # the region, but its pod is not known yet: nothing seen
        tracing.flush()
        assert not [s for s in spans.get_finished_spans() if s.name == SPAN]
        pods.append(_pod("uid-a", tracing.bound(KEY.encode(), "team", "uid-a", traceparent)))
        for _ in range(3):  # seen once, however many scrapes follow
            collector.view()
        tracing.flush()
        (seen,) = [s for s in spans.get_finished_spans() if s.name == SPAN]
        assert seen.context.trace_id == webhook.get_span_context().trace_id
        assert seen.parent is not None and seen.parent.span_id == webhook.get_span_context().span_id
        assert (seen.attributes or {})["k8s.container.name"] == "main"
        assert (seen.attributes or {})["k8s.pod.name"] == "p-uid-a"
    finally:
        lister.close()
        writer.close()


@pytest.mark.parametrize(
    ("bound_to", "reason"), [("uid-a", tracing.WRONG_POD), ("", tracing.UNBOUND)],
    ids=["another-pods", "the-webhooks"],
)
def test_a_context_not_bound_to_the_pod_is_not_joined(
    tmp_path: Path, spans: InMemorySpanExporter, registry: CollectorRegistry, bound_to: str, reason: str
) -> None:
    """Pod A's context copied onto pod B: the bind's form of A, or the webhook's (valid for the
    namespace, but never bound to B)."""
    webhook, traceparent = _webhook()
    key = KEY.encode()
    if bound_to:
        copied = tracing.bound(key, "team", bound_to, traceparent)
    else:
        copied = tracing.signed(key, "team", traceparent)
    pods = [_pod("uid-b", copied)]
    lister = ContainerLister(str(tmp_path))
    collector = MonitorCollector("node-1", lister, lambda: pods, decode_pod_devices)
    writer = _region(tmp_path, "uid-b_main")
    try:
        lister.update(None)
        assert len(collector.view().containers) == 1
        tracing.flush()
        (seen,) = [s for s in spans.get_finished_spans() if s.name == SPAN]
        assert seen.parent is None and seen.context.trace_id != webhook.get_span_context().trace_id
        assert registry.get_sample_value("hami_trace_context_rejected_total", {"reason": reason}) == 1.0
    finally:
        lister.close()
        writer.close()


def test_with_tracing_off_a_garbage_context_changes_nothing(tmp_path: Path) -> None:
    assert not tracing.enabled()
    pods = [_pod("uid-a", "garbage")]
    lister = ContainerLister(str(tmp_path))
    collector = MonitorCollector("node-1", lister, lambda: pods, decode_pod_devices)
    writer = _region(tmp_path, "uid-a_main")
    try:
        lister.update(None)
        assert len(collector.view().containers) == 1
    finally:
        lister.close()
        writer.close()
