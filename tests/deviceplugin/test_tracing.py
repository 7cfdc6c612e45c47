"""Allocate's span joins the pod's trace from the pod it already looks up, only through the context
the bind bound to that pod's UID; its duration carries the trace ID as an exemplar, on the daemon's
/metrics too; a context forged, malformed, copied from another pod or never bound is counted and
never joined, and Allocate goes on (docs/design/tracing.md). Spans go to the OpenTelemetry SDK's
in-memory exporter."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import requests
from kubernetes import client
from opentelemetry.sdk.trace import ReadableSpan, Span
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client.openmetrics.exposition import generate_latest

from hami.core import annotations as ann
from hami.core import tracing
from hami.core.objects import annotations_of
from hami.core.serve import serve_metrics
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.testing.builders import allocating_pod
from hami.testing.pluginrig import NODE, U1, Rig
from hami.testing.wait import wait_until

LOCK_TIME = "2026-08-21T06:20:39Z"
KEY = "k"
TRACEPARENT = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def allocate(rig: Rig, devices: list[str]) -> pb.AllocateResponse:
    """kubelet's Allocate for one container."""
    channel, stub = rig.kubelet.plugin("nvidia-gpu.sock")
    with channel:
        request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=devices)])
        return stub.Allocate(request)


@pytest.fixture
def spans(rig: Rig) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.setup("hami-device-plugin", tracing.tracing_metrics(rig.registry), key=KEY, exporter=exporter)
    yield exporter
    tracing.shutdown()


def _pending(rig: Rig, name: str, context: Callable[[str], str]) -> None:
    """A pod the bind left for Allocate, its trace context ``context(its UID)``."""
    body = allocating_pod(name, NODE, f"{U1},NVIDIA,3000,30:;", {"name": "main", "image": "cuda"})
    core = client.CoreV1Api(rig.kube_client)
    uid = core.create_namespaced_pod("default", body).metadata.uid
    annotation = {"metadata": {"annotations": {tracing.ANNOTATION: context(uid)}}}
    core.patch_namespaced_pod(name, "default", annotation)
    core.patch_node(NODE, {"metadata": {"annotations": {ann.NODE_LOCK: f"{LOCK_TIME},default,{name}"}}})
    wait_until(lambda: tracing.ANNOTATION in annotations_of(rig.pods.get(f"default/{name}") or {}),
               what="pod in the informer")


def _webhook() -> tuple[Span, str]:
    """The webhook's span and the traceparent it wrote."""
    webhook, annotation = tracing.webhook_span("default")
    tracing.end(webhook)
    assert webhook is not None
    return webhook, annotation[tracing.ANNOTATION].split(";")[0]


def _allocate_span(rig: Rig, spans: InMemorySpanExporter) -> ReadableSpan:
    (ctr,) = allocate(rig, [f"{U1}-2"]).container_responses
    assert ctr.envs["NVIDIA_VISIBLE_DEVICES"] == U1  # whatever the context, Allocate goes on
    tracing.flush()
    (span,) = [s for s in spans.get_finished_spans() if s.name == "hami.deviceplugin.allocate"]
    return span


def _rejected(rig: Rig, reason: str) -> float | None:
    return rig.registry.get_sample_value("hami_trace_context_rejected_total", {"reason": reason})


def test_allocate_joins_the_pods_trace_with_an_exemplar(rig: Rig, spans: InMemorySpanExporter) -> None:
    webhook, traceparent = _webhook()
    _pending(rig, "p1", lambda uid: tracing.bound(KEY.encode(), "default", uid, traceparent))
    span = _allocate_span(rig, spans)
    assert span.parent is not None and span.parent.span_id == webhook.get_span_context().span_id
    assert span.context.trace_id == webhook.get_span_context().trace_id
    assert (span.attributes or {})["k8s.pod.name"] == "p1"
    assert (span.attributes or {})["hami.allocate.containers"] == 1
    assert span.status.status_code is StatusCode.UNSET
    trace = f"{span.context.trace_id:032x}"
    exposition = generate_latest(rig.registry).decode().splitlines()
    with_exemplar = [x for x in exposition if f'# {{trace_id="{trace}"}}' in x]
    assert with_exemplar
    assert all(x.startswith("hami_deviceplugin_allocate_duration_seconds_bucket") for x in with_exemplar)
    # the same through the daemon's /metrics, served as its main serves it, asked for OpenMetrics
    with serve_metrics("127.0.0.1:0", rig.registry, name="hami-device-plugin") as server:
        r = requests.get(server.url + "/metrics", headers={"Accept": OPENMETRICS}, timeout=10)
        text = requests.get(server.url + "/metrics", timeout=10).text
    assert r.headers["Content-Type"].startswith("application/openmetrics-text")
    lines = [x for x in r.text.splitlines() if f'# {{trace_id="{trace}"}}' in x]
    assert lines and all(x.startswith("hami_deviceplugin_allocate_duration_seconds_bucket") for x in lines)
    assert "# {" not in text  # text format 0.0.4 has no exemplars


@pytest.mark.parametrize(
    ("context", "reason"),
    [
        (lambda uid: f"{TRACEPARENT};" + "f" * 32, tracing.FORGED),
        (lambda uid: f"{TRACEPARENT};{uid};" + "f" * 32, tracing.FORGED),
        (lambda uid: "garbage", tracing.MALFORMED),
        (lambda uid: f"{TRACEPARENT};;;", tracing.MALFORMED),
        (lambda uid: "x" * 10_000, tracing.MALFORMED),
        # the webhook's form, valid for the namespace: a copy the bind never bound to this pod
        (lambda uid: tracing.signed(KEY.encode(), "default", TRACEPARENT), tracing.UNBOUND),
        # the bind's form of another pod of the namespace, copied after its bind
        (lambda uid: tracing.bound(KEY.encode(), "default", "uid-of-another-pod", TRACEPARENT),
         tracing.WRONG_POD),
    ],
    ids=["forged", "forged-bound", "garbage", "empty-parts", "huge", "unbound", "another-pods"],
)
def test_a_context_not_bound_to_this_pod_is_counted_and_allocate_still_succeeds(
    rig: Rig, spans: InMemorySpanExporter, context: Callable[[str], str], reason: str
) -> None:
    _pending(rig, "p2", context)
    span = _allocate_span(rig, spans)
    assert span.parent is None and span.context.trace_id != int("a" * 32, 16)
    assert _rejected(rig, reason) == 1.0


def test_register_passes_and_scrapes_are_traces_of_their_own(rig: Rig, spans: InMemorySpanExporter) -> None:
    """Work of no single pod: each registration and each /metrics scrape is the root of its own
    trace, never the pod's whose Allocate ran beside it."""
    webhook, traceparent = _webhook()
    _pending(rig, "p1", lambda uid: tracing.bound(KEY.encode(), "default", uid, traceparent))
    pods = {_allocate_span(rig, spans).context.trace_id, webhook.get_span_context().trace_id}
    with serve_metrics("127.0.0.1:0", rig.registry, name="hami-device-plugin") as server:
        for accept in ("", OPENMETRICS):
            assert requests.get(server.url + "/metrics", headers={"Accept": accept}, timeout=10).ok

    def finished(name: str) -> list[ReadableSpan]:
        tracing.flush()
        return [s for s in spans.get_finished_spans() if s.name == name]

    registers = wait_until(lambda: finished("hami.deviceplugin.register"), what="a register pass's span")
    scrapes = finished("hami.metrics.scrape")
    assert len(scrapes) == 2
    for span in (*registers, *scrapes):
        assert span.parent is None and span.context.trace_id not in pods
    assert len({s.context.trace_id for s in (*registers, *scrapes)}) == len(registers) + len(scrapes)
    assert (registers[0].attributes or {})["k8s.node.name"] == NODE
