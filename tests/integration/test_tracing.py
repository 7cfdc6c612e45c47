"""One trace per GPU pod, in a real trace backend (docs/design/tracing.md): the stack of ``make demo``
(``hami.demo.stack``) with the three daemons tracing into Jaeger all-in-one
(``hami.demo.jaeger``, built from the Go module proxy and cached), and Prometheus keeping
exemplars.

A GPU pod created through the extender's webhook is scheduled by the kube-scheduler stand-in,
allocated by the kubelet stand-in and started on the simulated node; its trace in Jaeger holds
every daemon's spans, in order, each under its parent. A pod no node fits has the refusal reason
in its trace. Prometheus's ``/api/v1/query_exemplars`` leads from the filter histogram to a trace
Jaeger has.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import requests

from hami.core import tracing
from hami.demo import jaeger
from hami.demo.kubesched import admitted
from hami.demo.monitoring import ALERTMANAGER
from hami.demo.options import DEVICE_PLUGIN, MONITOR, SCHEDULER, Ports, StackOptions
from hami.demo.stack import Stack
from hami.testing.builders import gpu_pod
from hami.testing.prometheus import PROMETHEUS
from hami.testing.wait import WaitTimeout, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(Path(p).exists() for p in (PROMETHEUS, ALERTMANAGER)),
        reason="Debian prometheus packages missing",
    ),
    pytest.mark.skipif(
        jaeger.cached() is None and not jaeger.go_available(),
        reason=f"no Go toolchain to build Jaeger {jaeger.VERSION} (scripts/system-deps.sh installs it)",
    ),
]
T = TypeVar("T")
WAIT_S = 120.0
POD_SPANS = {  # span name -> its parent's name (None: the trace's root)
    "hami.webhook.mutate": None,
    "hami.scheduler.filter": "hami.webhook.mutate",
    "hami.scheduler.bind": "hami.webhook.mutate",
    "hami.scheduler.bind.pod_lookup": "hami.scheduler.bind",
    "hami.scheduler.bind.node_lookup": "hami.scheduler.bind",
    "hami.scheduler.bind.node_lock": "hami.scheduler.bind",
    "hami.scheduler.bind.apiserver_bind": "hami.scheduler.bind",
    "hami.deviceplugin.allocate": "hami.webhook.mutate",
    "hami.monitor.region_first_seen": "hami.webhook.mutate",
}
SERVICES = {
    "hami.webhook": "hami-scheduler", "hami.scheduler": "hami-scheduler",
    "hami.deviceplugin": "hami-device-plugin", "hami.monitor": "hami-monitor",
}


def poll(check: Callable[[], T | None], what: str) -> T:
    return wait_until(check, WAIT_S, what, interval=0.5)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[jaeger.Jaeger]:
    binary = jaeger.build()  # cached: .ci/run builds it before the tests
    with jaeger.Jaeger(binary, tmp_path_factory.mktemp("jaeger")) as running:
        yield running


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, backend: jaeger.Jaeger) -> Iterator[Stack]:
    opts = StackOptions(
        workdir=tmp_path_factory.mktemp("traced"),
        ports=Ports(**dict.fromkeys(vars(Ports()), 0)),
        scrape_interval="1s",
        evaluation_interval="1s",
        scenarios=False,
        xid_every=0.0,
        churn_every=3600.0,
        schedule_every=0.5,
        components=(MONITOR, SCHEDULER, DEVICE_PLUGIN),
        tracing=backend.otlp_endpoint,
    )
    s = Stack(opts)
    s.start()
    try:
        yield s
    finally:
        codes = s.stop()
        assert all(code == 0 for code in codes.values()), f"unclean exits: {codes}"


def _create_through_webhook(stack: Stack, pod: dict[str, Any]) -> dict[str, Any]:
    """What the API server does with a pod: the mutating webhook's patch, then the create."""
    mutated = admitted(requests.Session(), stack.url("extender"), pod)
    r = requests.post(f"{stack.kube_url}/api/v1/namespaces/default/pods", json=mutated, timeout=10)
    r.raise_for_status()
    created: dict[str, Any] = r.json()
    return created


def _trace_id(pod: dict[str, Any]) -> str:
    trace = tracing.trace_id(pod)
    assert trace, pod["metadata"].get("annotations")
    return trace


def _spans(backend: jaeger.Jaeger, trace: str, want: Callable[[list[dict[str, Any]]], bool]) -> list[Any]:
    seen: list[str] = []  # the span names of the last answer: a timeout says which are missing

    def found() -> list[dict[str, Any]] | None:
        got = backend.trace(trace)
        if got is None:
            return None
        spans: list[dict[str, Any]] = got["spans"]
        for span in spans:
            span["service"] = got["processes"][span["processID"]]["serviceName"]
        seen[:] = sorted(s["operationName"] for s in spans)
        return spans if want(spans) else None

    try:
        return poll(found, f"trace {trace} in Jaeger")
    except WaitTimeout as err:
        raise WaitTimeout(f"{err}; the spans it had: {seen or 'none'}") from err


def _tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span.get("tags", [])}


def test_one_gpu_pods_trace_has_every_daemons_spans_in_order(stack: Stack, backend: jaeger.Jaeger) -> None:
    pod = _create_through_webhook(stack, gpu_pod("traced", mem=1000))
    trace = _trace_id(pod)
    spans = _spans(backend, trace, lambda s: set(POD_SPANS) <= {x["operationName"] for x in s})
    by_name = {s["operationName"]: s for s in sorted(spans, key=lambda s: s["startTime"])}
    assert set(by_name) == set(POD_SPANS)
    ids = {s["spanID"]: s["operationName"] for s in spans}
    for name, parent in POD_SPANS.items():
        refs = [r for r in by_name[name].get("references", []) if r["refType"] == "CHILD_OF"]
        assert [ids.get(r["spanID"]) for r in refs] == ([parent] if parent else []), name
        service = next(v for prefix, v in SERVICES.items() if name.startswith(prefix + "."))
        assert by_name[name]["service"] == service, name
    start = {name: s["startTime"] for name, s in by_name.items()}
    order = ["hami.webhook.mutate", "hami.scheduler.filter", "hami.scheduler.bind"]
    assert [start[n] for n in order] == sorted(start[n] for n in order), start
    # after the bind, the node's two: the simulated host starts a bound pod's container (its region)
    # without waiting for the kubelet stand-in's Allocate, so their order is the machine's
    after = ("hami.deviceplugin.allocate", "hami.monitor.region_first_seen")
    assert all(start[n] >= start["hami.scheduler.bind"] for n in after), start
    bind = by_name["hami.scheduler.bind"]
    for phase in [n for n in POD_SPANS if n.startswith("hami.scheduler.bind.")]:
        span = by_name[phase]
        assert bind["startTime"] <= span["startTime"]
        assert span["startTime"] + span["duration"] <= bind["startTime"] + bind["duration"]
    assert _tags(by_name["hami.scheduler.filter"])["hami.filter.verdict"] == "fit"
    assert _tags(by_name["hami.monitor.region_first_seen"])["k8s.pod.name"] == "traced"


def test_a_refused_pods_trace_carries_the_reason(stack: Stack, backend: jaeger.Jaeger) -> None:
    pod = _create_through_webhook(stack, gpu_pod("too-big", mem=10**6))
    trace = _trace_id(pod)
    spans = _spans(backend, trace, lambda s: any(x["operationName"] == "hami.scheduler.filter" for x in s))
    refused = [_tags(s) for s in spans if s["operationName"] == "hami.scheduler.filter"]
    assert refused
    assert all(t["error"] is True and t["hami.filter.verdict"] == "unschedulable" for t in refused)
    assert all("CardInsufficientMemory" in t["hami.error"] for t in refused), refused


def test_prometheus_exemplars_lead_to_traces_jaeger_has(stack: Stack, backend: jaeger.Jaeger) -> None:
    _create_through_webhook(stack, gpu_pod("exemplary", mem=1000))

    def exemplar_traces() -> set[str] | None:
        now = time.time()
        query = "hami_scheduler_filter_duration_seconds_bucket"
        r = requests.get(
            stack.url("prometheus") + "/api/v1/query_exemplars",
            params={"query": query, "start": str(now - 600), "end": str(now)},
            timeout=10,
        )
        r.raise_for_status()
        found = {e["labels"]["trace_id"] for s in r.json()["data"] for e in s["exemplars"]}
        return found or None

    traces = poll(exemplar_traces, "exemplars of the filter histogram in Prometheus")
    assert poll(lambda: [t for t in traces if backend.trace(t) is not None] or None, "a trace Jaeger knows")
