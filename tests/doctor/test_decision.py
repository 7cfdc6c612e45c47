"""`hami-doctor pod` reads the scheduler's decision record and names the reason with its numbers."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import yaml

from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.extender import create_pod, filter_pod, running
from hami.testing.kubeapi import KubeAPIServer
from tests.doctor.doctorcluster import codes, hami_node, hami_pod, run_doctor, run_json


def test_unschedulable_pod_gets_the_numbers_from_the_record(kube_api: KubeAPIServer, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(kube_api.kubeconfig()), encoding="utf-8")
    kube_api.store.put(gpu_node("gpu-a", mem=40960))
    kube_api.store.put(gpu_node("gpu-b", mem=20480))
    with running(kube_api) as ext:
        assert ext.metrics_server is not None
        huge = gpu_pod("huge", mem=163840)
        huge["spec"]["schedulerName"] = "hami-scheduler"
        pod = create_pod(kube_api, ext, huge)
        assert filter_pod(ext, pod, ["gpu-a", "gpu-b", "gone"])["NodeNames"] is None
        url = ext.metrics_server.url
        code, text = run_doctor(kubeconfig, "pod", "default/huge", "--scheduler-url", url)
        _, doc = run_json(kubeconfig, "pod", "default/huge", "--scheduler-url", url)
    assert code == 2
    assert (
        "diagnosis: CardInsufficientMemory: requests 160 GiB per card; the largest free on any node is "
        "40 GiB (gpu-a)"
    ) in text
    codes = [f["code"] for f in doc["sections"][0]["findings"]]
    assert codes[-2:] == ["pod.decision.CardInsufficientMemory", "pod.decision.node-no_devices"]
    assert "gone: the scheduler places no GPU pod there (no_devices; node unregistered)" in text


def test_running_pod_is_reported_as_scheduled(kube_api: KubeAPIServer, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(kube_api.kubeconfig()), encoding="utf-8")
    pod = gpu_pod("ok", mem=1000)
    pod["spec"]["schedulerName"] = "hami-scheduler"
    pod["spec"]["nodeName"] = "gpu-a"
    pod["status"] = {"phase": "Running"}
    kube_api.store.put(pod)
    code, text = run_doctor(kubeconfig, "pod", "default/ok", "--scheduler-url", "http://127.0.0.1:9")
    assert code == 0, text
    assert "pod bound to gpu-a; pod phase Running" in text
    assert "no HAMi scheduler pod found" not in text


def test_unreachable_scheduler_falls_back_to_events(kube_api: KubeAPIServer, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(kube_api.kubeconfig()), encoding="utf-8")
    pod = gpu_pod("waiting", mem=1000)
    pod["spec"]["schedulerName"] = "hami-scheduler"
    kube_api.store.put(pod)
    code, text = run_doctor(kubeconfig, "pod", "default/waiting", "--scheduler-url", "http://127.0.0.1:9")
    assert "cannot reach the scheduler at http://127.0.0.1:9" in text
    assert code == 2  # no scheduler pod, no record, no event: the tree stops at the scheduler


def test_the_doctor_judges_a_lock_by_the_schedulers_own_expiry(
    kube_api: KubeAPIServer, tmp_path: Path
) -> None:
    """With --scheduler-url the doctor reads the scheduler's --node-lock-timeout from its metrics: a
    lock 10 minutes old holds the node under a 30m expiry (a warning, as HAMiNodeLockHeldTooLong fires),
    and holds nothing under the default 5m (info: the next bind takes it over)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(kube_api.kubeconfig()), encoding="utf-8")
    kube_api.store.put(hami_node("n", lock="2025-06-13T09:00:00Z,default,owner"))
    kube_api.store.put(hami_pod("owner", node_name="n"))
    with running(kube_api, node_lock_timeout=timedelta(minutes=30)) as ext:
        assert ext.metrics_server is not None
        url = ext.metrics_server.url
        code, doc = run_json(kubeconfig, "node", "n", "--scheduler-url", url)
        assert (code, codes(doc)[-2:]) == (1, ["node.lock.stuck", "node.schedulable"])
        assert "timeout 30m0s" in doc["sections"][0]["findings"][-2]["evidence"][-1]
        # a flag the operator gives wins
        code, doc = run_json(kubeconfig, "node", "n", "--scheduler-url", url, "--node-lock-timeout", "5m")
        assert (code, codes(doc)[-2]) == (0, "node.lock.expired")
    code, doc = run_json(kubeconfig, "node", "n", "--scheduler-url", "http://127.0.0.1:9")
    lock = next(f for f in doc["sections"][0]["findings"] if f["code"] == "node.lock.expired")
    assert (code, lock["severity"]) == (0, "info")
