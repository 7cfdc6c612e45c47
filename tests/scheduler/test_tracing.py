"""The extender's spans (docs/design/tracing.md): one trace per pod from the webhook through filter
and bind, HAMi's bind phase names, a refused pod's reason, tenants' trace contexts ignored and
counted, the register loop in traces of its own, and exemplars on an OpenMetrics scrape.

The spans go to the OpenTelemetry SDK's own in-memory exporter (the real SDK, batching included).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from hami.core import annotations as ann
from hami.core import tracing
from hami.core.objects import annotations_of
from hami.scheduler.extender.daemon import Extender
from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.extender import bind_pod, create_pod, filter_pod, metrics_text, running, url
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.kubeapi.patch import json_patch as apply_json_patch
from hami.testing.wait import wait_until

KEY = "test-key"
BIND_PHASES = [
    f"hami.scheduler.bind.{p}" for p in ("pod_lookup", "node_lookup", "node_lock", "apiserver_bind")
]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    tracing.shutdown()


@pytest.fixture
def ext(kube_api: KubeAPIServer, spans: InMemorySpanExporter) -> Iterator[Extender]:
    kube_api.store.put(gpu_node("n1", gpus=1, count=4))
    with running(kube_api, scheduler_name="hami-scheduler") as extender:
        tracing.setup("hami-scheduler", key=KEY, exporter=spans)
        yield extender


def _admitted(ext: Extender, pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` as the webhook's patch leaves it."""
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "r", "namespace": pod["metadata"]["namespace"], "operation": "CREATE", "object": pod,
        },
    }
    r = requests.post(url(ext, "/webhook"), json=review, timeout=10)
    response = r.json()["response"]
    assert response["allowed"], response
    patched: dict[str, Any] = apply_json_patch(pod, json.loads(base64.b64decode(response["patch"])))
    return patched


def _finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    tracing.flush()
    # in start order; a parent starts with its first phase, and ends after it
    return sorted(exporter.get_finished_spans(), key=lambda s: (s.start_time or 0, -(s.end_time or 0)))


def _pod_spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in _finished(exporter) if (s.attributes or {}).get("k8s.pod.name") == name]


def test_one_pod_is_one_trace_from_webhook_to_bind(
    kube_api: KubeAPIServer, ext: Extender, spans: InMemorySpanExporter
) -> None:
    pod = create_pod(kube_api, ext, _admitted(ext, gpu_pod("p1", mem=1000)))
    assert tracing.ANNOTATION in pod["metadata"]["annotations"]
    assert filter_pod(ext, pod, ["n1"])["NodeNames"] == ["n1"]
    assert bind_pod(ext, pod, "n1") == ""
    done = _finished(spans)
    webhook = next(s for s in done if s.name == "hami.webhook.mutate")
    trace = webhook.context.trace_id
    mine = [s for s in done if s.context.trace_id == trace]
    names = [s.name for s in mine]
    assert names == ["hami.webhook.mutate", "hami.scheduler.filter", "hami.scheduler.bind", *BIND_PHASES]
    by_name = {s.name: s for s in mine}
    assert webhook.parent is None
    for child in ("hami.scheduler.filter", "hami.scheduler.bind"):
        parent = by_name[child].parent
        assert parent is not None and parent.span_id == webhook.context.span_id
    bind = by_name["hami.scheduler.bind"]
    for name in BIND_PHASES:
        span = by_name[name]
        assert span.parent is not None and span.parent.span_id == bind.context.span_id
        assert bind.start_time <= span.start_time <= span.end_time <= bind.end_time  # type: ignore[operator]
    assert by_name["hami.scheduler.filter"].attributes == {
        "k8s.namespace.name": "default", "k8s.pod.name": "p1", "k8s.pod.uid": pod["metadata"]["uid"],
        "hami.filter.candidates": 1, "hami.filter.verdict": "fit", "hami.filter.node": "n1",
        "hami.filter.failed_nodes": 0,
    }
    assert bind.status.status_code is StatusCode.UNSET


def test_a_refused_pod_carries_the_reason_in_its_trace(
    kube_api: KubeAPIServer, ext: Extender, spans: InMemorySpanExporter
) -> None:
    pod = create_pod(kube_api, ext, _admitted(ext, gpu_pod("big", mem=10**6)))
    reply = filter_pod(ext, pod, ["n1"])
    assert reply["NodeNames"] is None
    (span,) = [s for s in _pod_spans(spans, "big") if s.name == "hami.scheduler.filter"]
    assert span.status.status_code is StatusCode.ERROR
    assert "CardInsufficientMemory" in (span.status.description or "")
    assert (span.attributes or {})["hami.filter.verdict"] == "unschedulable"
    webhook = next(s for s in _finished(spans) if s.name == "hami.webhook.mutate")
    assert span.context.trace_id == webhook.context.trace_id


def _rejected(ext: Extender, reason: str) -> float:
    line = rf'^hami_trace_context_rejected_total{{reason="{reason}"}} (\S+)$'
    found = re.search(line, metrics_text(ext), re.M)
    assert found, reason
    return float(found.group(1))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("garbage", tracing.MALFORMED),
        ("00-" + "a" * 32 + "-" + "b" * 16 + "-01", tracing.MALFORMED),  # no MAC at all
        ("00-" + "a" * 32 + "-" + "b" * 16 + "-01;" + "0" * 32, tracing.FORGED),
        ("x" * 10_000, tracing.MALFORMED),
    ],
)
def test_a_tenants_trace_context_is_ignored_and_counted(
    kube_api: KubeAPIServer, ext: Extender, spans: InMemorySpanExporter, value: str, reason: str
) -> None:
    """Set after admission (annotations are the tenant's to edit): never joined, never an error."""
    pod = gpu_pod("t", mem=1000)
    pod["metadata"]["annotations"] = {tracing.ANNOTATION: value}
    pod = create_pod(kube_api, ext, pod)
    before = _rejected(ext, reason)
    assert filter_pod(ext, pod, ["n1"])["NodeNames"] == ["n1"]
    assert bind_pod(ext, pod, "n1") == ""
    assert _rejected(ext, reason) == before + 2  # the filter's read and the bind's
    for span in _pod_spans(spans, "t"):
        assert span.context.trace_id != int("a" * 32, 16)
        assert span.name.startswith("hami.scheduler.bind.") or span.parent is None


def test_a_context_signed_for_another_namespace_is_forged(
    kube_api: KubeAPIServer, ext: Extender, spans: InMemorySpanExporter
) -> None:
    theirs = _admitted(ext, gpu_pod("victim", mem=1000, namespace="other"))["metadata"]["annotations"]
    pod = gpu_pod("copy", mem=1000)
    pod["metadata"]["annotations"] = {tracing.ANNOTATION: theirs[tracing.ANNOTATION]}
    pod = create_pod(kube_api, ext, pod)
    before = _rejected(ext, tracing.FORGED)
    filter_pod(ext, pod, ["n1"])
    assert _rejected(ext, tracing.FORGED) == before + 1
    (span,) = _pod_spans(spans, "copy")
    assert span.parent is None


def test_the_webhook_overwrites_a_context_the_tenant_wrote(ext: Extender) -> None:
    pod = gpu_pod("p", mem=1000)
    pod["metadata"]["annotations"] = {tracing.ANNOTATION: "00-" + "a" * 32 + "-" + "b" * 16 + "-01;x"}
    value = _admitted(ext, pod)["metadata"]["annotations"][tracing.ANNOTATION]
    assert "a" * 32 not in value and tracing.verify("default", value)[1] is None


def test_the_register_loop_has_traces_of_its_own(ext: Extender, spans: InMemorySpanExporter) -> None:
    ext.register.run_once()
    passes = [s for s in _finished(spans) if s.name == "hami.scheduler.register"]
    assert passes and all(s.parent is None for s in passes)
    pods = {s.context.trace_id for s in _finished(spans) if s.name != "hami.scheduler.register"}
    assert not pods & {s.context.trace_id for s in passes}


def test_openmetrics_scrapes_carry_the_trace_id_as_exemplar(
    kube_api: KubeAPIServer, ext: Extender, spans: InMemorySpanExporter
) -> None:
    pod = create_pod(kube_api, ext, _admitted(ext, gpu_pod("p1", mem=1000)))
    filter_pod(ext, pod, ["n1"])
    bind_pod(ext, pod, "n1")
    trace = f"{next(s for s in _finished(spans) if s.name == 'hami.webhook.mutate').context.trace_id:032x}"
    assert ext.metrics_server is not None
    r = requests.get(
        ext.metrics_server.url + "/metrics", headers={"Accept": "application/openmetrics-text"}, timeout=10
    )
    assert r.headers["Content-Type"].startswith("application/openmetrics-text")
    for family in (
        "hami_scheduler_filter_duration_seconds", "hami_scheduler_bind_duration_seconds",
        "hami_scheduler_pod_creation_to_bind_seconds",
    ):
        lines = [x for x in r.text.splitlines() if x.startswith(family + "_bucket") and "# {" in x]
        assert lines and all(f'trace_id="{trace}"' in x for x in lines), family
    assert "# {" not in metrics_text(ext)  # text format 0.0.4 has no exemplars


def test_tracing_off_writes_nothing(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1", gpus=1, count=4))
    with running(kube_api, scheduler_name="hami-scheduler") as ext:
        assert not tracing.enabled()
        pod = create_pod(kube_api, ext, _admitted(ext, gpu_pod("p1", mem=1000)))
        assert tracing.ANNOTATION not in (pod["metadata"].get("annotations") or {})
        assert filter_pod(ext, pod, ["n1"])["NodeNames"] == ["n1"]


def test_a_refused_admission_is_a_trace_with_the_reason(
    kube_api: KubeAPIServer, ext: Extender, spans: InMemorySpanExporter
) -> None:
    pod = gpu_pod("priv", mem=1000)
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    review = {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "r", "namespace": "default", "operation": "CREATE", "object": pod},
    }
    response = requests.post(url(ext, "/webhook"), json=review, timeout=10).json()["response"]
    assert not response["allowed"] and "patch" not in response
    (span,) = [s for s in _finished(spans) if s.name == "hami.webhook.mutate"]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "container c0 is privileged"


def _copy_of(pod: dict[str, Any], name: str) -> dict[str, Any]:
    """A second pod of the namespace with ``pod``'s trace context copied onto it after admission."""
    copy = gpu_pod(name, mem=1000, namespace=pod["metadata"]["namespace"])
    copy["metadata"]["annotations"] = {tracing.ANNOTATION: pod["metadata"]["annotations"][tracing.ANNOTATION]}
    return copy


def _stored_context(api: KubeAPIServer, name: str) -> str:
    pod = api.store.get("pods", name, "default")
    assert pod is not None
    return str(pod["metadata"]["annotations"][tracing.ANNOTATION])


def _unlock(api: KubeAPIServer, ext: Extender) -> None:
    node = api.store.get("nodes", "n1")
    assert node is not None
    node["metadata"]["annotations"].pop(ann.NODE_LOCK)
    api.store.put(node)
    wait_until(lambda: ann.NODE_LOCK not in annotations_of(ext.state.get_node("n1") or {}), what="unlocked")


def _trace_of(exporter: InMemorySpanExporter, name: str) -> set[int]:
    return {s.context.trace_id for s in _pod_spans(exporter, name)}


def test_the_bind_binds_the_context_to_the_pods_uid(
    kube_api: KubeAPIServer, ext: Extender, spans: InMemorySpanExporter
) -> None:
    pod = create_pod(kube_api, ext, _admitted(ext, gpu_pod("p1", mem=1000)))
    filter_pod(ext, pod, ["n1"])
    assert bind_pod(ext, pod, "n1") == ""
    value = _stored_context(kube_api, "p1")
    traceparent, reason = tracing.verify("default", value, pod["metadata"]["uid"], bound_only=True)
    assert reason is None and traceparent is not None
    webhook = next(s for s in _finished(spans) if s.name == "hami.webhook.mutate")
    assert traceparent == (
        f"00-{webhook.context.trace_id:032x}-{webhook.context.span_id:016x}-{int(webhook.context.trace_flags):02x}"
    )
    assert tracing.verify("default", value, "another-uid", bound_only=True) == (None, tracing.WRONG_POD)


def test_a_copy_before_bind_is_refused_and_the_original_keeps_its_trace(
    kube_api: KubeAPIServer, ext: Extender, spans: InMemorySpanExporter
) -> None:
    original = create_pod(kube_api, ext, _admitted(ext, gpu_pod("a", mem=1000)))
    filter_pod(ext, original, ["n1"])
    copy = create_pod(kube_api, ext, _copy_of(original, "b"))
    before = _rejected(ext, tracing.COPIED)
    assert filter_pod(ext, copy, ["n1"])["NodeNames"] == ["n1"]
    assert bind_pod(ext, copy, "n1") == ""
    assert _rejected(ext, tracing.COPIED) == before + 2  # the copy's filter and bind
    _unlock(kube_api, ext)  # as Allocate would
    assert bind_pod(ext, original, "n1") == ""
    webhook = next(s for s in _finished(spans) if s.name == "hami.webhook.mutate")
    assert _trace_of(spans, "a") == {webhook.context.trace_id}
    assert webhook.context.trace_id not in _trace_of(spans, "b")
    # the bind wrote nothing for the copy: Allocate and the monitor will not join it either
    uid = copy["metadata"]["uid"]
    verdict = tracing.verify("default", _stored_context(kube_api, "b"), uid, bound_only=True)
    assert verdict == (None, tracing.UNBOUND)


def test_a_copy_of_a_context_not_yet_joined_joins_for_neither_pod(
    kube_api: KubeAPIServer, ext: Extender, spans: InMemorySpanExporter
) -> None:
    """Which of two pods carrying one context is the copy is unknowable (an older pod can carry a
    newer one's context): neither joins, so no tenant's copy ever does."""
    original = create_pod(kube_api, ext, _admitted(ext, gpu_pod("a", mem=1000)))
    copy = create_pod(kube_api, ext, _copy_of(original, "b"))
    before = _rejected(ext, tracing.COPIED)
    filter_pod(ext, copy, ["n1"])
    filter_pod(ext, original, ["n1"])
    assert _rejected(ext, tracing.COPIED) == before + 2
    webhook = next(s for s in _finished(spans) if s.name == "hami.webhook.mutate")
    assert webhook.context.trace_id not in _trace_of(spans, "a") | _trace_of(spans, "b")


@pytest.mark.parametrize("filtered", [True, False], ids=["joined", "never-filtered"])
def test_a_copy_from_a_deleted_pod_is_refused(
    kube_api: KubeAPIServer, ext: Extender, spans: InMemorySpanExporter, filtered: bool
) -> None:
    original = create_pod(kube_api, ext, _admitted(ext, gpu_pod("a", mem=1000)))
    if filtered:
        filter_pod(ext, original, ["n1"])
    kube_api.store.remove("pods", "a", "default")
    wait_until(lambda: ext.state.get_pod("default", "a") is None, what="pod a gone from the cache")
    copy = create_pod(kube_api, ext, _copy_of(original, "b"))
    before = _rejected(ext, tracing.COPIED)
    filter_pod(ext, copy, ["n1"])
    assert _rejected(ext, tracing.COPIED) == before + 1
    (span,) = _pod_spans(spans, "b")
    assert span.parent is None


def test_a_bound_context_copied_onto_another_pod_is_refused_at_filter(
    kube_api: KubeAPIServer, ext: Extender, spans: InMemorySpanExporter
) -> None:
    original = create_pod(kube_api, ext, _admitted(ext, gpu_pod("a", mem=1000)))
    filter_pod(ext, original, ["n1"])
    bind_pod(ext, original, "n1")
    bound = kube_api.store.get("pods", "a", "default")
    assert bound is not None
    copy = create_pod(kube_api, ext, _copy_of(bound, "b"))
    before = _rejected(ext, tracing.WRONG_POD)
    assert filter_pod(ext, copy, ["n1"])["NodeNames"] == ["n1"]
    assert _rejected(ext, tracing.WRONG_POD) == before + 1
    (span,) = _pod_spans(spans, "b")
    assert span.parent is None


def test_a_scrape_is_a_trace_of_its_own(
    kube_api: KubeAPIServer, ext: Extender, spans: InMemorySpanExporter
) -> None:
    """Each /metrics request, text or OpenMetrics, is the root of a trace of its own, never the
    pod's whose filter and bind ran around it."""
    pod = create_pod(kube_api, ext, _admitted(ext, gpu_pod("p1", mem=1000)))
    filter_pod(ext, pod, ["n1"])
    metrics_text(ext)
    bind_pod(ext, pod, "n1")
    assert ext.metrics_server is not None
    openmetrics = {"Accept": "application/openmetrics-text"}
    assert requests.get(ext.metrics_server.url + "/metrics", headers=openmetrics, timeout=10).ok
    scrapes = [s for s in _finished(spans) if s.name == "hami.metrics.scrape"]
    assert len(scrapes) == 2 and all(s.parent is None for s in scrapes)
    pods = {s.context.trace_id for s in _finished(spans) if s.name != "hami.metrics.scrape"}
    assert len({s.context.trace_id for s in scrapes} - pods) == 2
