"""Allocate's span joins the pod's trace from the pod it already looks up, its duration carries the
trace ID as an exemplar, and a context the tenant forged is counted and never joined
(docs/design/tracing.md). Spans go to the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client.openmetrics.exposition import generate_latest

from hami.core import annotations as ann
from hami.core import tracing
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.testing.builders import allocating_pod
from hami.testing.pluginrig import NODE, U1, Rig
from hami.testing.wait import wait_until

LOCK_TIME = "2026-08-21T06:20:39Z"


def allocate(rig: Rig, devices: list[str]) -> pb.AllocateResponse:
    """kubelet's Allocate for one container."""
    channel, stub = rig.kubelet.plugin("nvidia-gpu.sock")
    with channel:
        request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=devices)])
        return stub.Allocate(request)


@pytest.fixture
def spans(rig: Rig) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.setup("hami-device-plugin", tracing.tracing_metrics(rig.registry), key="k", exporter=exporter)
    yield exporter
    tracing.shutdown()


def _pending(rig: Rig, name: str, context: str) -> None:
    body = allocating_pod(name, NODE, f"{U1},NVIDIA,3000,30:;", {"name": "main", "image": "cuda"})
    body["metadata"]["annotations"][tracing.ANNOTATION] = context
    core = client.CoreV1Api(rig.kube_client)
    core.create_namespaced_pod("default", body)
    core.patch_node(NODE, {"metadata": {"annotations": {ann.NODE_LOCK: f"{LOCK_TIME},default,{name}"}}})
    wait_until(lambda: rig.pods.get(f"default/{name}"), what="pod in the informer")


def test_allocate_joins_the_pods_trace_with_an_exemplar(rig: Rig, spans: InMemorySpanExporter) -> None:
    webhook, annotation = tracing.webhook_span("default")
    tracing.end(webhook)
    assert webhook is not None
    _pending(rig, "p1", annotation[tracing.ANNOTATION])
    allocate(rig, [f"{U1}-2"])
    tracing.flush()
    (span,) = [s for s in spans.get_finished_spans() if s.name == "hami.deviceplugin.allocate"]
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


def test_a_forged_context_is_counted_and_allocate_still_succeeds(
    rig: Rig, spans: InMemorySpanExporter
) -> None:
    _pending(rig, "p2", "00-" + "a" * 32 + "-" + "b" * 16 + "-01;" + "f" * 32)
    (ctr,) = allocate(rig, [f"{U1}-2"]).container_responses
    assert ctr.envs["NVIDIA_VISIBLE_DEVICES"] == U1
    tracing.flush()
    (span,) = [s for s in spans.get_finished_spans() if s.name == "hami.deviceplugin.allocate"]
    assert span.parent is None and span.context.trace_id != int("a" * 32, 16)
    value = rig.registry.get_sample_value("hami_trace_context_rejected_total", {"reason": tracing.FORGED})
    assert value == 1.0
