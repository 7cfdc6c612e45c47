"""End to end over HTTP: filter → bind → pod annotations and events; register and handshake."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from prometheus_client.parser import text_string_to_metric_families

from hami.core.codec.handshake import format_requesting
from hami.core.codec.nodelock import is_owned_by
from hami.core.codec.pod_devices import decode_pod_devices
from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.extender import (
    Extender,
    bind_pod,
    create_pod,
    events_for,
    filter_pod,
    metrics_text,
    running,
)
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until
from hami.testing.zone import local_zone


def _writes(text: str) -> Counter[str]:
    """The extender's API writes so far, by verb, from its ``rest_client_requests_total``."""
    out: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith("rest_client_requests_total{"):
            verb = line.split('method="', 1)[1].split('"', 1)[0]
            if verb != "GET":
                out[verb] += int(float(line.rsplit(" ", 1)[1]))
    return out


def _handshaken(ext: Extender, node: str) -> bool:
    cached = ext.state.get_node(node)
    return cached is not None and "hami.io/node-handshake" in cached["metadata"].get("annotations", {})


def test_filter_bind_writes_annotations_lock_binding_and_events(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))
    kube_api.store.put(gpu_node("n2", mem=16000))
    with running(kube_api, scheduler_name="hami-scheduler") as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p1", mem=3000, cores=30))
        wait_until(lambda: all(_handshaken(ext, n) for n in ("n1", "n2")), what="handshakes")
        before = _writes(metrics_text(ext))
        reply = filter_pod(ext, pod, ["n1", "n2", "ghost"])
        assert reply["Error"] == ""
        assert len(reply["NodeNames"]) == 1
        node = reply["NodeNames"][0]
        assert reply["FailedNodes"] is None  # as HAMi answers a fit: the chosen node only
        # The filter only reserves: the pod is written once, by the Binding.
        stored = kube_api.store.get("pods", "p1", "default")
        assert stored is not None
        assert stored["metadata"]["resourceVersion"] == pod["metadata"]["resourceVersion"]

        assert bind_pod(ext, pod, node) == ""
        bound = kube_api.store.get("pods", "p1", "default")
        assert bound is not None and bound["spec"]["nodeName"] == node
        annos = bound["metadata"]["annotations"]
        assert annos["hami.io/bind-phase"] == "allocating" and annos["hami.io/bind-time"].isdigit()
        assert annos["hami.io/vgpu-node"] == node and annos["hami.io/vgpu-time"].isdigit()
        assert annos["hami.io/vgpu-devices-to-allocate"] == annos["hami.io/vgpu-devices-allocated"]
        (device,), _empty = decode_pod_devices(annos["hami.io/vgpu-devices-allocated"])
        assert device.uuid.startswith(f"GPU-{node}-") and (device.usedmem, device.usedcores) == (3000, 30)
        lock = kube_api.store.get("nodes", node)
        assert lock is not None and is_owned_by(
            lock["metadata"]["annotations"]["hami.io/mutex.lock"], "default", "p1"
        )

        ext.recorder.flush()
        events = events_for(kube_api, "p1")
        assert ("BindingSucceed", f"Successfully binding node [{node}] to default/p1") in events
        assert any(
            r == "FilteringSucceed" and m.startswith(f"find fit node({node}), 1 nodes not fit, 2 nodes fit(")
            for r, m in events
        )
        text = metrics_text(ext)
        assert 'hami_scheduler_events_total{reason="BindingSucceed"} 1.0' in text
        assert 'hami_scheduler_bind_duration_seconds_count{result="success"} 1.0' in text
        for phase in ("node_lock", "bind"):
            assert f'hami_scheduler_bind_phase_duration_seconds_count{{phase="{phase}"}} 1.0' in text
        # Four writes for the pod: node lock, Binding, FilteringSucceed and BindingSucceed.
        assert _writes(text) - before == Counter({"POST": 3, "PATCH": 1})
        assert f'hami_scheduler_node_lock_held{{node="{node}"}} 1.0' in text
        assert "hami_gpu_memory_allocated_bytes{" in text and "hami_scheduler_is_leader 1.0" in text


def test_bind_without_this_replicas_reservation_fails_cleanly(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))
    kube_api.store.put(gpu_node("n2"))
    with running(kube_api) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p1", mem=3000))
        # Never filtered here (as after a restart): refused before the lock, nothing written.
        error = bind_pod(ext, pod, "n1")
        assert error == (
            "pod default/p1 has no device reservation on node n1 in this hami-scheduler (it restarted, "
            "or another replica filtered the pod); the scheduler will filter it again"
        )
        node = filter_pod(ext, pod, ["n1", "n2"])["NodeNames"][0]
        other = "n2" if node == "n1" else "n1"
        error = bind_pod(ext, pod, other)
        assert error.startswith(f"pod default/p1 was filtered onto node {node}, not {other}")
        for name in ("n1", "n2"):
            stored_node = kube_api.store.get("nodes", name)
            assert stored_node is not None
            assert "hami.io/mutex.lock" not in stored_node["metadata"]["annotations"]
        stored = kube_api.store.get("pods", "p1", "default")
        assert stored is not None and not stored["spec"].get("nodeName")
        assert "hami.io/bind-phase" not in stored["metadata"].get("annotations", {})
        # The retry kube-scheduler makes (filter, then bind) goes through.
        node = filter_pod(ext, pod, ["n1", "n2"])["NodeNames"][0]
        assert bind_pod(ext, pod, node) == ""
        ext.recorder.flush()
        failed = [m for r, m in events_for(kube_api, "p1") if r == "BindingFailed"]
        assert len(failed) == 2 and "no device reservation" in failed[0]



def test_unschedulable_pod_gets_reasons_events_and_failure_counts(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("gpu-node-01", mem=4096))
    with running(kube_api) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("big", mem=8192))
        reply = filter_pod(ext, pod, ["gpu-node-01"])
        assert reply["NodeNames"] is None
        assert reply["FailedNodes"] == {"gpu-node-01": "2/2 CardInsufficientMemory"}
        ext.recorder.flush()
        events = events_for(kube_api, "big")
        assert ("FilteringFailed", "Bindingfailed: CardInsufficientMemory on node gpu-node-01") in events
        assert ("FilteringFailed", "1 nodes CardInsufficientMemory(gpu-node-01)") in events
        assert ("FilteringFailed", "no available node, 1 nodes do not meet") in events
        text = metrics_text(ext)
        assert 'hami_scheduler_filter_failures_total{reason="CardInsufficientMemory"} 1.0' in text
        assert "hami_scheduler_pods_unschedulable_total 1.0" in text
        assert 'hami_scheduler_pending_pods{namespace="default",reason="CardInsufficientMemory"} 1.0' in text


def test_pod_without_gpu_passes_through_untouched(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))
    with running(kube_api) as ext:
        pod = {
            "metadata": {"name": "plain", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{}]},
        }
        assert filter_pod(ext, pod, ["n1", "n2"]) == {
            "NodeNames": ["n1", "n2"],
            "FailedNodes": None,
            "Error": "",
        }


def test_register_writes_handshake_once_then_idle_ticks_cost_no_calls(kube_api: KubeAPIServer) -> None:
    for i in range(5):
        kube_api.store.put(gpu_node(f"n{i}"))
    with running(kube_api, register_tick=3600) as ext:
        wait_until(
            lambda: all(
                "Requesting_"
                in (kube_api.store.get("nodes", f"n{i}") or {})["metadata"]["annotations"].get(
                    "hami.io/node-handshake", ""
                )
                for i in range(5)
            ),
            what="handshakes written",
        )
        wait_until(
            lambda: all(
                ext.state.get_node(f"n{i}")["metadata"]["annotations"].get("hami.io/node-handshake")  # type: ignore[index]
                for i in range(5)
            ),
            what="cache sees handshakes",
        )
        ext.register.run_once()
        kube_api.requests.clear()
        for _ in range(3):
            ext.register.run_once()
        assert len(kube_api.requests.records) == 0
        assert sorted(ext.state.nodes) == [f"n{i}" for i in range(5)]


def _handshake_age(text: str, node: str) -> float:
    for family in text_string_to_metric_families(text):
        if family.name == "hami_node_handshake_age_seconds":
            for sample in family.samples:
                if sample.labels["node"] == node:
                    return float(sample.value)
    raise AssertionError(f"no hami_node_handshake_age_seconds for {node}")


def test_expired_handshake_and_undecodable_register_are_marked_and_skipped(kube_api: KubeAPIServer) -> None:
    # The handshake is the scheduler's local time with no zone: pinned to one without daylight saving,
    # so "3 minutes ago" cannot fall in a repeated hour, whatever the machine's zone and date.
    with local_zone("UTC"):
        _expired_and_undecodable(kube_api)


def _expired_and_undecodable(kube_api: KubeAPIServer) -> None:
    written = datetime.now(UTC)
    old = format_requesting(written - timedelta(minutes=3))
    kube_api.store.put(gpu_node("stale", annotations={"hami.io/node-handshake": old}, allocatable=0))
    bad = gpu_node("bad")
    bad["metadata"]["annotations"]["hami.io/node-nvidia-register"] = "GPU-0,10,8000,100,T4,0,true:"
    kube_api.store.put(bad)
    kube_api.store.put(gpu_node("good"))
    with running(kube_api) as ext:
        assert sorted(ext.state.nodes) == ["good"]
        text = metrics_text(ext)
        assert 'hami_scheduler_nodes{state="handshake_expired"} 1.0' in text
        assert 'hami_scheduler_nodes{state="decode_error"} 1.0' in text
        assert 'hami_scheduler_nodes{state="healthy"} 1.0' in text
        assert 'hami_scheduler_decode_errors_total{source="node_register"} 1.0' in text
        # Written to the second (up to 1 s earlier), read after the time this test has taken since.
        taken = (datetime.now(UTC) - written).total_seconds()
        assert 180 <= _handshake_age(text, "stale") <= 180 + 1 + taken
        pod = create_pod(kube_api, ext, gpu_pod("p"))
        reply = filter_pod(ext, pod, ["stale", "bad", "good"])
        assert reply["NodeNames"] == ["good"]
        assert reply["FailedNodes"] is None  # a fit names the chosen node only, as HAMi's
        reply = filter_pod(ext, pod, ["stale", "bad"])
        assert reply["FailedNodes"] == {"stale": "node unregistered", "bad": "node unregistered"}
        # Renewing the handshake resets its age.
        node = kube_api.store.get("nodes", "stale")
        assert node is not None
        renewed = datetime.now(UTC)
        node["metadata"]["annotations"]["hami.io/node-handshake"] = format_requesting(renewed)
        kube_api.store.put(node)
        wait_until(lambda: _handshake_age(metrics_text(ext), "stale") < 180, what="age reset")
        taken = (datetime.now(UTC) - renewed).total_seconds()
        assert 0 <= _handshake_age(metrics_text(ext), "stale") <= 1 + taken
