"""The dry-run filter over HTTP (§4.1 step 2, docs/design/scheduler.md §9.3): ExtenderArgs with ``Nodes``, as
a
``nodeCacheCapable: false`` caller (Cluster Autoscaler) sends them.

Section signs (§) refer to docs/design/scheduler-filter.md.
"""

from __future__ import annotations

from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from hami.scheduler.extender.daemon import Extender
from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.engineinputs import quota_snapshot
from hami.testing.extender import create_pod, events_for, filter_pod, metrics_text, running, url
from hami.testing.kubeapi import KubeAPIServer

Obj = dict[str, Any]


def _dry_run(ext: Extender, pod: Obj, nodes: list[Obj], names: list[str] | None = None) -> Obj:
    body = {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": names}
    r = requests.post(url(ext, "/filter"), json=body, timeout=30)
    assert r.status_code == 200, r.text
    reply: Obj = r.json()
    return reply


def _filter_metrics(ext: Extender) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(metrics_text(ext)):
        for s in family.samples:
            if s.name == "hami_scheduler_filter_duration_seconds_count":
                out[(s.name, s.labels["result"])] = s.value
            elif s.name == "hami_scheduler_filter_failures_total":
                out[(s.name, s.labels["reason"])] = s.value
            elif s.name == "hami_scheduler_pods_unschedulable_total":
                out[(s.name, "")] = s.value
    return out


def test_dry_run_scores_supplied_nodes_from_zero_and_writes_nothing(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1", gpus=1))
    with running(kube_api, scheduler_name="hami-scheduler") as ext:
        # Fill n1's only card for real: the live filter reserves it for the holder pod's bind.
        holder = create_pod(kube_api, ext, gpu_pod("holder", mem=8000))
        assert filter_pod(ext, holder, ["n1"])["NodeNames"] == ["n1"]
        assert filter_pod(ext, gpu_pod("probe", mem=8000), ["n1"])["NodeNames"] is None
        ext.recorder.flush()
        pod = create_pod(kube_api, ext, gpu_pod("ca-probe", mem=8000))
        live_node = kube_api.store.get("nodes", "n1")
        assert live_node is not None
        template = gpu_node("template-a", mem=16000)
        before = _filter_metrics(ext)
        with ext.state.lock:
            usage_before = sorted(a.uid for a in ext.state.usage.pods())
            quota_before = quota_snapshot(ext.state.quotas)

        # Usage starts at zero: n1's real reservation does not count, so n1 fits again.
        assert _dry_run(ext, pod, [live_node])["Nodes"] == {"metadata": {}, "items": [live_node]}
        reply = _dry_run(ext, pod, [live_node, {"metadata": {"name": "cpu-only"}}, template])
        assert reply["Error"] == "" and reply["NodeNames"] is None
        (best,) = reply["Nodes"]["items"]
        assert best in (live_node, template)
        assert reply["FailedNodes"] == {"cpu-only": "node unregistered"}
        assert reply["FailedAndUnresolvableNodes"] is None

        # Nothing written: no assignment for a bind, no reservation, no quota usage, no event.
        with ext.state.lock:
            assert pod["metadata"]["uid"] not in ext.state.assignments
            assert sorted(a.uid for a in ext.state.usage.pods()) == usage_before
            assert quota_snapshot(ext.state.quotas) == quota_before
        ext.recorder.flush()
        assert events_for(kube_api, "ca-probe") == []

        after = _filter_metrics(ext)
        key = "hami_scheduler_filter_duration_seconds_count"
        assert after[(key, "simulated_fit")] == before[(key, "simulated_fit")] + 2
        assert {k: v for k, v in after.items() if k[1] != "simulated_fit"} == {
            k: v for k, v in before.items() if k[1] != "simulated_fit"
        }


def test_dry_run_with_no_fit_answers_failed_nodes_only(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))
    with running(kube_api) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("big", mem=9000))
        reply = _dry_run(ext, pod, [gpu_node("template-a")])
        assert reply == {
            "Nodes": None,
            "NodeNames": None,
            "FailedNodes": {"template-a": "2/2 CardInsufficientMemory"},
            "FailedAndUnresolvableNodes": None,
            "Error": "",
        }
        ext.recorder.flush()
        assert events_for(kube_api, "big") == []
        text = metrics_text(ext)
        assert 'hami_scheduler_filter_duration_seconds_count{result="simulated_unschedulable"} 1.0' in text
        assert "hami_scheduler_pods_unschedulable_total 0.0" in text
        assert 'hami_scheduler_filter_failures_total{reason="CardInsufficientMemory"} 0.0' in text


def test_dry_run_errors_passthrough_and_malformed_nodes(kube_api: KubeAPIServer) -> None:
    with running(kube_api) as ext:
        bad = gpu_pod("bad")
        bad["metadata"]["annotations"] = {"hami.io/device-scoring-weights": "slot=-1,core=1,memory=1"}
        reply = _dry_run(ext, bad, [gpu_node("t")])
        assert reply["Error"].startswith("calcScore failed invalid hami.io/device-scoring-weights")
        assert reply["Nodes"] is None and reply["FailedNodes"] is None

        cpu = gpu_pod("cpu", mem=None)
        cpu["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
        sent = gpu_node("t")
        reply = _dry_run(ext, cpu, [sent])
        # Every node sent comes back: NodeNames echoed (null here), as HAMi; Nodes too, unlike HAMi.
        assert (reply["NodeNames"], reply["Error"]) == (None, "")
        assert reply["Nodes"]["items"] == [sent]
        assert _dry_run(ext, cpu, [gpu_node("t")], names=["t"])["NodeNames"] == ["t"]

        for nodes in ([], {"items": "x"}, {"items": [1]}):
            r = requests.post(url(ext, "/filter"), json={"Pod": gpu_pod("p"), "Nodes": nodes}, timeout=30)
            assert r.status_code == 400 and "Nodes" in r.json()["Error"]
        text = metrics_text(ext)
        for result, count in (("simulated_error", 1), ("simulated_passthrough", 2), ("error", 0)):
            assert f'hami_scheduler_filter_duration_seconds_count{{result="{result}"}} {count}.0' in text


def test_null_nodes_keeps_the_live_path(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))
    with running(kube_api) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p"))
        body = {"Pod": pod, "Nodes": None, "NodeNames": ["n1"]}
        reply = requests.post(url(ext, "/filter"), json=body, timeout=30).json()
        assert reply["NodeNames"] == ["n1"]
        # A live filter: the pod's devices are reserved for its bind.
        assert ext.state.assignments[pod["metadata"]["uid"]].node == "n1"
