"""OpenTelemetry spans of the three daemons, one trace per GPU pod (docs/design/tracing.md).

The one seam between the daemons and the OpenTelemetry SDK. ``--enable-tracing`` calls ``setup``;
until then the tracer is None and every function here returns at its first line: the hot path
does no OpenTelemetry work, and the SDK is not even imported. The OTLP endpoint, the sampler and
its ratio come from the standard ``OTEL_*`` variables, which the SDK reads itself
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_TRACES_SAMPLER``, ``OTEL_TRACES_SAMPLER_ARG``).

One trace per pod: the webhook starts the pod's trace and writes its context on the pod
(``ANNOTATION``: a W3C traceparent, then ``;`` and a MAC). Filter, bind, Allocate and the monitor
read it from the pod they already hold. A tenant can edit its pod's annotations, so a context is
joined only when its MAC verifies: HMAC-SHA256 under the key in ``HAMI_TRACE_KEY`` that only the
daemons hold. The webhook's MAC covers the namespace and the traceparent (a pod has no UID at
admission), so the extender also refuses a context another pod carries (``admit``); the bind then
re-signs it bound to the pod's UID (``bound``), and Allocate and the monitor accept only that form,
for the pod they hold. Anything else is ignored, counted by reason, and the span starts a trace of
its own. Work of no single pod (``own_span``) starts a fresh trace, never a pod's.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import CollectorRegistry, Counter

from hami.core import annotations as ann
from hami.core import klog

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import Span, Tracer, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

log = klog.get_logger(__name__)

ANNOTATION: Final = ann.POD_TRACE_CONTEXT
KEY_ENV: Final = "HAMI_TRACE_KEY"
# Why a pod's trace context was not joined (hami_trace_context_rejected_total{reason}).
MALFORMED: Final = "malformed"  # not "<traceparent>;[<uid>;]<mac>" with a valid version-00 traceparent
FORGED: Final = "forged"  # the MAC does not verify: not what a daemon wrote for this namespace
NO_KEY: Final = "no_key"  # this daemon has no HAMI_TRACE_KEY to verify with
COPIED: Final = "copied"  # the extender refused it: another pod carries, or carried, the same trace
WRONG_POD: Final = "wrong_pod"  # the bind's form, bound to another pod's UID
UNBOUND: Final = "unbound"  # the webhook's form where only the bind's (bound to the pod) is accepted
REASONS: Final = (MALFORMED, FORGED, NO_KEY, COPIED, WRONG_POD, UNBOUND)
MAX_VALUE: Final = 256  # a longer annotation is malformed before any parsing
_TRACEPARENT: Final = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_UID: Final = re.compile(r"[0-9a-z-]{1,64}")  # the API server's UIDs are UUIDs
_MAC_HEX: Final = 32  # 128 bits of HMAC-SHA256


class _State:
    """This process's tracing: one daemon per process (tests that run several share it)."""

    tracer: Tracer | None = None
    provider: TracerProvider | None = None
    key: bytes = b""
    rejected: Counter | None = None


_s = _State()


def tracing_metrics(registry: CollectorRegistry) -> Counter:
    """The rejection counter on ``registry``, every reason at 0 from the start."""
    counter = Counter(
        "hami_trace_context_rejected_total",
        f"Pod trace contexts ({ANNOTATION}) ignored with --enable-tracing, by reason (malformed, "
        "forged: the MAC does not verify, no_key: HAMI_TRACE_KEY unset, copied: another pod carries "
        "the same trace, wrong_pod: bound to another pod's UID, unbound: not bound to the pod by the "
        "bind); the pod's spans start a trace of their own.",
        ["reason"],
        registry=registry,
    )
    for reason in REASONS:
        counter.labels(reason)
    return counter


def enabled() -> bool:
    return _s.tracer is not None


def add_tracing_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--enable-tracing",
        nargs="?",
        const=True,
        default=False,
        type=lambda text: text.strip().lower() in ("1", "t", "true", "yes", "on"),
        help="send OpenTelemetry spans over OTLP/HTTP (endpoint, sampler and ratio: the OTEL_* "
        f"variables); ${KEY_ENV} joins the daemons' spans of one pod into one trace",
    )


def start(service: str, registry: CollectorRegistry, enable: bool) -> None:
    """A daemon's start: the rejection counter on its registry, and spans when ``enable``."""
    _s.rejected = tracing_metrics(registry)
    if enable:
        setup(service)


def setup(
    service: str,
    rejected: Counter | None = None,
    *,
    key: str | None = None,
    exporter: SpanExporter | None = None,
) -> None:
    """Turn tracing on for this process: spans of ``service`` go to ``exporter`` (default OTLP over
    HTTP, configured by ``OTEL_*``), batched off the request path. ``key`` defaults to
    ``$HAMI_TRACE_KEY``."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    shutdown()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))  # sampler: OTEL_*
    provider.add_span_processor(BatchSpanProcessor(exporter))
    _s.key = (os.environ.get(KEY_ENV, "") if key is None else key).encode()
    if not _s.key:
        log.warning("tracing on without %s: each daemon's spans of a pod start their own trace", KEY_ENV)
    _s.rejected = rejected or _s.rejected
    _s.provider = provider
    _s.tracer = provider.get_tracer("hami")  # type: ignore[assignment]


def shutdown() -> None:
    """Flush and stop (the daemon's exit); tracing is off afterwards."""
    provider, _s.tracer, _s.provider = _s.provider, None, None
    if provider is not None:
        provider.shutdown()


def flush(timeout_s: float = 5.0) -> None:
    if _s.provider is not None:
        _s.provider.force_flush(int(timeout_s * 1000))


def now_ns() -> int:
    """A span start taken before the pod is known (``pod_span(start_ns=...)``); 0 when off."""
    return time.time_ns() if _s.tracer is not None else 0


def signed(key: bytes, namespace: str, traceparent: str) -> str:
    """The webhook's annotation value for ``traceparent`` on a pod in ``namespace``: what only a
    holder of ``key`` can write."""
    digest = hmac.new(key, f"{namespace}\n{traceparent}".encode(), hashlib.sha256).hexdigest()
    return f"{traceparent};{digest[:_MAC_HEX]}"


def bound(key: bytes, namespace: str, uid: str, traceparent: str) -> str:
    """The bind's annotation value: ``traceparent`` bound to the pod with ``uid`` (``<traceparent>;
    <uid>;<mac>``), so a copy on another pod does not verify there."""
    message = f"bound\n{namespace}\n{uid}\n{traceparent}".encode()
    return f"{traceparent};{uid};{hmac.new(key, message, hashlib.sha256).hexdigest()[:_MAC_HEX]}"


def verify(
    namespace: str, value: str, uid: str = "", *, bound_only: bool = False
) -> tuple[str | None, str | None]:
    """(traceparent, None) when ``value`` is what the webhook wrote for ``namespace``, or what the
    bind wrote for the pod ``uid``; only the latter when ``bound_only``. Else (None, rejection
    reason). Pure apart from the key."""
    if len(value) > MAX_VALUE:
        return None, MALFORMED
    parts = value.split(";")
    traceparent = parts[0]
    match = _TRACEPARENT.fullmatch(traceparent)
    if (
        len(parts) not in (2, 3)
        or match is None
        or set(match.group(1)) == {"0"}
        or set(match.group(2)) == {"0"}
        or (len(parts) == 3 and _UID.fullmatch(parts[1]) is None)
    ):
        return None, MALFORMED
    if not _s.key:
        return None, NO_KEY
    owner = parts[1] if len(parts) == 3 else ""
    if owner:
        expected = bound(_s.key, namespace, owner, traceparent)
    else:
        expected = signed(_s.key, namespace, traceparent)
    if not hmac.compare_digest(value.encode(), expected.encode()):
        return None, FORGED
    if owner and owner != uid:
        return None, WRONG_POD
    if not owner and bound_only:
        return None, UNBOUND
    return traceparent, None


Admit = Callable[[Mapping[str, Any], str], bool]


def _verified(pod: Mapping[str, Any], bound_only: bool, admit: Admit | None) -> tuple[str | None, str | None]:
    """``verify`` on the pod's own annotation, then ``admit``: (traceparent, None), (None, None)
    when the pod carries none, or (None, reason)."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    value = annotations.get(ANNOTATION) if isinstance(annotations, Mapping) else None
    if value is None:
        return None, None
    namespace, uid = metadata.get("namespace"), metadata.get("uid")
    traceparent, reason = verify(
        namespace if isinstance(namespace, str) else "", str(value), uid if isinstance(uid, str) else "",
        bound_only=bound_only,
    )
    if traceparent is not None and admit is not None and not admit(pod, traceparent[3:35]):
        return None, COPIED
    return traceparent, reason


def _pod_parent(pod: Mapping[str, Any], bound_only: bool, admit: Admit | None) -> Any:
    """The pod's verified context, or an empty one (a trace of its own); rejections counted."""
    from opentelemetry.context import Context
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

    traceparent, reason = _verified(pod, bound_only, admit)
    if traceparent is None:
        if reason is not None:
            if _s.rejected is not None:
                _s.rejected.labels(reason).inc()
            metadata = pod.get("metadata") or {}
            log.v(4).info("pod %s/%s: trace context ignored: %s", metadata.get("namespace"),
                          metadata.get("name"), reason)
        return Context()
    _, trace_id, span_id, flags = traceparent.split("-")
    remote = SpanContext(int(trace_id, 16), int(span_id, 16), True, TraceFlags(int(flags, 16)))
    return set_span_in_context(NonRecordingSpan(remote), Context())


def pod_span(
    name: str,
    pod: Mapping[str, Any],
    start_ns: int = 0,
    attributes: Mapping[str, Any] | None = None,
    *,
    bound_only: bool = False,
    admit: Admit | None = None,
) -> Span | None:
    """A started span in ``pod``'s trace (None when off); the caller ``end``s it. ``bound_only``:
    join only the bind's form, bound to this pod's UID. ``admit(pod, trace_id)``: whether this pod
    may join that trace (the extender's check against the other pods carrying it)."""
    if _s.tracer is None:
        return None
    span = _s.tracer.start_span(
        name, context=_pod_parent(pod, bound_only, admit), attributes=_attrs(pod, attributes),
        start_time=start_ns or None,
    )
    return span  # type: ignore[return-value]


def bound_annotation(pod: Mapping[str, Any], admit: Admit | None = None) -> dict[str, str]:
    """For the bind to write: the pod's context, when it joins (as ``pod_span`` with ``admit``
    decides, sampled or not), bound to the pod's UID; ``{}`` when off or it joins none."""
    if _s.tracer is None:
        return {}
    metadata = pod.get("metadata") or {}
    uid, namespace = str(metadata.get("uid") or ""), str(metadata.get("namespace") or "")
    traceparent, _ = _verified(pod, False, admit)
    if traceparent is None or _UID.fullmatch(uid) is None:
        return {}
    return {ANNOTATION: bound(_s.key, namespace, uid, traceparent)}


def own_span(name: str, attributes: Mapping[str, Any] | None = None) -> Span | None:
    """A started span at the root of a trace of its own: work that belongs to no single pod."""
    if _s.tracer is None:
        return None
    from opentelemetry.context import Context

    return _s.tracer.start_span(name, context=Context(), attributes=attributes)  # type: ignore[return-value]


def webhook_span(namespace: str) -> tuple[Span | None, dict[str, str]]:
    """The span that starts a pod's trace at admission, and the annotation that carries it
    (``{}`` when off, or when no key could sign it)."""
    if _s.tracer is None:
        return None, {}
    from opentelemetry.context import Context

    span: Span = _s.tracer.start_span(  # type: ignore[assignment]
        "hami.webhook.mutate", context=Context(), attributes={"k8s.namespace.name": namespace}
    )
    if not _s.key:
        return span, {}
    ctx = span.get_span_context()
    traceparent = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
    return span, {ANNOTATION: signed(_s.key, namespace, traceparent)}


def phase(
    parent: Span | None, name: str, start_ns: int, end_ns: int, attributes: Mapping[str, Any] | None = None
) -> None:
    """A finished child span of ``parent``, timed by the caller (a bind phase). None under an
    unsampled parent: it would not be recorded either, and nine pods in ten are unsampled at the
    chart's ratio."""
    if parent is None or _s.tracer is None or not parent.is_recording():
        return
    from opentelemetry.trace import set_span_in_context

    child = _s.tracer.start_span(
        name, context=set_span_in_context(parent), attributes=attributes, start_time=start_ns
    )
    child.end(end_ns)


def end(span: Span | None, error: str = "", attributes: Mapping[str, Any] | None = None) -> None:
    """Set ``attributes``, mark an ``error`` (the refusal reason), and end the span."""
    if span is None:
        return
    from opentelemetry.trace import Status, StatusCode

    if attributes:
        span.set_attributes(dict(attributes))
    if error:
        span.set_attribute("hami.error", error)
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()


def exemplar(span: Span | None) -> dict[str, str] | None:
    """The OpenMetrics exemplar labels of an observation made in ``span``: its trace ID when the
    span is sampled (an unsampled trace is nowhere to be found)."""
    if span is None:
        return None
    ctx = span.get_span_context()
    if not ctx.trace_flags.sampled:
        return None
    return {"trace_id": f"{ctx.trace_id:032x}"}


def trace_id(pod: Mapping[str, Any]) -> str:
    """The trace ID in the pod's annotation as written (unverified: for display), or ""."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    match = _TRACEPARENT.match(str(value or ""))
    return match.group(1) if match else ""


def _attrs(pod: Mapping[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    metadata = pod.get("metadata") or {}
    out = {
        "k8s.namespace.name": str(metadata.get("namespace") or ""),
        "k8s.pod.name": str(metadata.get("name") or ""),
        "k8s.pod.uid": str(metadata.get("uid") or ""),
    }
    if extra:
        out.update(extra)
    return out
