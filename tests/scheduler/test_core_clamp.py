"""``nvidia.com/gpucores`` above 100, as HAMi takes it: the webhook admits the pod, the filter places
it as a whole card (HAMi's Fit clamps to 100: its test "fit success: but core limit can't exceed
100"), with a Warning event on the pod that says what changed and a counter. Values that cannot
mean anything are still refused (tests/security/test_bad_input.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

import requests
from prometheus_client import CollectorRegistry

from hami.core import annotations as ann
from hami.core.codec.pod_devices import decode_pod_devices
from hami.scheduler.engine.requests import Clamps
from hami.scheduler.extender import events
from hami.scheduler.extender.metrics import SchedulerMetrics
from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.extender import bind_pod, create_pod, events_for, filter_pod, metrics_text, running, url
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until

CLAMPED = "container c0: nvidia.com/gpucores 120 is more than 100, taken as 100 (a whole card), as HAMi does"


PCT_CLAMPED = (
    "container c0: nvidia.com/gpumem-percentage 150 is more than 100, taken as 100 (the whole card's "
    "memory), as HAMi does"
)


def _counter(text: str, family: str = "hami_scheduler_gpucores_clamped_total") -> float:
    line = next(x for x in text.splitlines() if x.startswith(family + " "))
    return float(line.split()[1])


def _events(text: str, reason: str) -> float:
    return _counter(text, f'hami_scheduler_events_total{{reason="{reason}"}}')


def test_gpucores_above_100_is_placed_as_a_whole_card_with_a_warning_and_a_count(
    kube_api: KubeAPIServer,
) -> None:
    kube_api.store.put(gpu_node("n1", gpus=1))
    with running(kube_api) as ext:
        assert _counter(metrics_text(ext)) == 0
        pod = create_pod(kube_api, ext, gpu_pod("big", mem=1000, cores=120))
        assert filter_pod(ext, pod, ["n1"])["NodeNames"] == ["n1"]
        assert bind_pod(ext, pod, "n1") == ""
        wait_until(lambda: (events.REQUEST_CLAMPED, CLAMPED) in events_for(kube_api, "big"), what="the event")
        assert _counter(metrics_text(ext)) == 1
        # The same card is now exclusive: a second pod does not fit beside it.
        other = create_pod(kube_api, ext, gpu_pod("small", mem=1000, cores=10))
        assert not filter_pod(ext, other, ["n1"]).get("NodeNames")
    bound = kube_api.store.get("pods", "big", "default")
    assert bound is not None
    container = decode_pod_devices(bound["metadata"]["annotations"][ann.POD_DEVICES_ALLOCATED])[0]
    assert [d.usedcores for d in container] == [100]  # what the device plugin turns into the SM limit


def test_webhook_admits_gpucores_above_100_with_a_warning(kube_api: KubeAPIServer) -> None:
    pod = gpu_pod("big", mem=1000, cores=120)
    review: dict[str, Any] = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "r1", "namespace": "default", "operation": "CREATE", "object": pod},
    }
    with running(kube_api, scheduler_name="hami-scheduler") as ext:
        answer = requests.post(url(ext, "/webhook"), json=review, timeout=30).json()["response"]
    assert answer["allowed"] is True and answer["warnings"] == [CLAMPED]
    patch = json.loads(base64.b64decode(answer["patch"]))
    assert not any("gpucores" in op["path"] for op in patch)  # the pod keeps what it asked, as in HAMi


def test_a_pending_pods_filter_retries_report_its_clamp_once(kube_api: KubeAPIServer) -> None:
    """kube-scheduler filters a pending pod again every few seconds: one event and one count per pod."""
    kube_api.store.put(gpu_node("n1", gpus=1))
    kube_api.store.put(gpu_node("n2", gpus=1))
    with running(kube_api) as ext:
        first = create_pod(kube_api, ext, gpu_pod("big", mem=1000, cores=120))
        second = create_pod(kube_api, ext, gpu_pod("other", mem=1000, cores=150))
        for _ in range(3):
            assert filter_pod(ext, first, ["n1"])["NodeNames"] == ["n1"]
        assert filter_pod(ext, second, ["n2"])["NodeNames"] == ["n2"]
        text = metrics_text(ext)
        assert _counter(text) == 2
        assert _events(text, events.REQUEST_CLAMPED) == 2


def test_gpumem_percentage_above_100_at_the_filter_is_placed_as_100_as_hami_does(
    kube_api: KubeAPIServer,
) -> None:
    """HAMi's GenerateResourceRequests clamps it (its webhook refuses it; a pod can skip the webhook
    under failurePolicy: Ignore): the whole card's memory, a Warning event and a count, once per pod."""
    kube_api.store.put(gpu_node("n1", gpus=1, mem=16384))
    pod = gpu_pod("pct", mem=None)
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] = "150"
    with running(kube_api) as ext:
        stored = create_pod(kube_api, ext, pod)
        for _ in range(2):
            assert filter_pod(ext, stored, ["n1"])["NodeNames"] == ["n1"]
        assert bind_pod(ext, stored, "n1") == ""
        wait_until(
            lambda: (events.PERCENTAGE_CLAMPED, PCT_CLAMPED) in events_for(kube_api, "pct"), what="the event"
        )
        text = metrics_text(ext)
        assert _counter(text, "hami_scheduler_gpumem_percentage_clamped_total") == 1
        assert _events(text, events.PERCENTAGE_CLAMPED) == 1
    bound = kube_api.store.get("pods", "pct", "default")
    assert bound is not None
    container = decode_pod_devices(bound["metadata"]["annotations"][ann.POD_DEVICES_ALLOCATED])[0]
    assert [d.usedmem for d in container] == [16384]


def test_the_pods_remembered_are_bounded_and_the_oldest_is_reported_again() -> None:
    registry = CollectorRegistry()
    pod_events = events.PodEvents(None, SchedulerMetrics(registry))
    clamps = Clamps((CLAMPED,), ())

    def filtered(i: int) -> float:
        pod_events.clamped({"metadata": {"name": f"p{i}", "namespace": "default", "uid": f"u{i}"}}, clamps)
        return registry.get_sample_value("hami_scheduler_gpucores_clamped_total") or 0.0

    most = events.CLAMPED_PODS_REMEMBERED
    for i in range(most + 1):  # the last one pushes u0 out
        filtered(i)
    assert filtered(most) == most + 1  # still remembered: not counted again
    assert filtered(0) == most + 2  # forgotten: reported again
