"""hami.core.tracing's pure parts: the trace context a tenant may write on its pod is verified, never
trusted, and no text makes the check raise (docs/design/tracing.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from hami.core import tracing

KEY = b"k"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def keyed() -> Iterator[None]:
    tracing.setup("test", tracing.tracing_metrics(CollectorRegistry()), key=KEY.decode(),
                  exporter=InMemorySpanExporter())
    yield
    tracing.shutdown()


def test_off_every_entry_point_is_inert() -> None:
    assert not tracing.enabled()
    assert tracing.now_ns() == 0
    assert tracing.pod_span("x", {}) is None and tracing.own_span("x") is None
    assert tracing.webhook_span("ns") == (None, {})
    assert tracing.exemplar(None) is None
    tracing.end(None, "error")
    tracing.phase(None, "x", 1, 2)


@pytest.mark.usefixtures("keyed")
def test_only_the_value_signed_for_the_namespace_verifies() -> None:
    value = tracing.signed(KEY, "team", TRACEPARENT)
    assert tracing.verify("team", value) == (TRACEPARENT, None)
    assert tracing.verify("other", value) == (None, tracing.FORGED)
    elsewhere = tracing.signed(b"not the key", "team", TRACEPARENT)
    assert tracing.verify("team", elsewhere) == (None, tracing.FORGED)
    assert tracing.verify("team", TRACEPARENT) == (None, tracing.MALFORMED)
    for bad in (
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",  # the invalid all-zero trace ID
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # another version
        TRACEPARENT.upper(),
        "x" * (tracing.MAX_VALUE + 1),
    ):
        assert tracing.verify("team", tracing.signed(KEY, "team", bad)) == (None, tracing.MALFORMED)


@pytest.mark.usefixtures("keyed")
def test_the_binds_form_verifies_only_for_its_pods_uid() -> None:
    value = tracing.bound(KEY, "team", "uid-a", TRACEPARENT)
    assert tracing.verify("team", value, "uid-a", bound_only=True) == (TRACEPARENT, None)
    assert tracing.verify("team", value, "uid-a") == (TRACEPARENT, None)
    assert tracing.verify("team", value, "uid-b", bound_only=True) == (None, tracing.WRONG_POD)
    assert tracing.verify("other", value, "uid-a", bound_only=True) == (None, tracing.FORGED)
    # the UID swapped in by hand: the MAC no longer verifies
    assert tracing.verify("team", value.replace("uid-a", "uid-b"), "uid-b") == (None, tracing.FORGED)
    webhooks = tracing.signed(KEY, "team", TRACEPARENT)
    assert tracing.verify("team", webhooks, "uid-a", bound_only=True) == (None, tracing.UNBOUND)
    assert tracing.verify("team", f"{TRACEPARENT};UID!;{'0' * 32}", "UID!") == (None, tracing.MALFORMED)


@pytest.mark.usefixtures("keyed")
@given(st.text(max_size=300))
def test_no_text_makes_the_check_raise(value: str) -> None:
    traceparent, reason = tracing.verify("team", value)
    assert (traceparent is None) != (reason is None)
    assert traceparent is None or value == tracing.signed(KEY, "team", traceparent)
    traceparent, reason = tracing.verify("team", value, "uid-a", bound_only=True)
    assert (traceparent is None) != (reason is None)
    assert traceparent is None or value == tracing.bound(KEY, "team", "uid-a", traceparent)


def test_without_a_key_nothing_verifies() -> None:
    tracing.setup("test", key="", exporter=InMemorySpanExporter())
    try:
        assert tracing.verify("team", tracing.signed(b"", "team", TRACEPARENT)) == (None, tracing.NO_KEY)
        span, annotation = tracing.webhook_span("team")
        assert span is not None and annotation == {}  # a span, but nothing to sign the context with
        tracing.end(span)
    finally:
        tracing.shutdown()


def test_trace_id_shows_the_annotations_id_unverified() -> None:
    pod = {"metadata": {"annotations": {tracing.ANNOTATION: TRACEPARENT + ";whatever"}}}
    assert tracing.trace_id(pod) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert tracing.trace_id({"metadata": {"annotations": {tracing.ANNOTATION: "junk"}}}) == ""
    assert tracing.trace_id({}) == ""
