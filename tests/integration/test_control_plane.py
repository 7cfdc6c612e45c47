"""The chart and the extender against the real Kubernetes control plane (kube-apiserver, etcd and
kube-scheduler built from k8s.io/kubernetes, ``hami.testing.controlplane``): what the emulator and
the kube-scheduler stand-in cannot prove, because they agree with us by construction."""

from __future__ import annotations

import copy
import re
import socket
from typing import Any

import pytest
import requests
import yaml

from hami.core import annotations as ann
from hami.core import names
from hami.core.codec.pod_devices import decode_pod_devices
from hami.testing import builders
from hami.testing.controlplane import ControlPlane
from hami.testing.controlplane.deploy import Hami, wait_bound
from hami.testing.wait import wait_until

pytestmark = pytest.mark.slow
Obj = dict[str, Any]
WAIT_S = 120.0  # kube-scheduler retries an unschedulable pod with backoff; generous for 2 loaded cores


def gpu_pod(name: str, mem: int) -> Obj:
    """A pod of one container asking for one vGPU of ``mem`` MiB (with the image the server requires)."""
    pod = builders.gpu_pod(name, mem=mem, namespace="default")
    pod["spec"]["containers"][0]["image"] = "busybox"
    return pod


def create_pod(cp: ControlPlane, pod: Obj) -> Obj:
    ns = pod["metadata"].get("namespace", "default")
    with cp.session() as s:
        reply = s.post(f"{cp.url}/api/v1/namespaces/{ns}/pods", json=pod, timeout=30)
    assert reply.status_code == 201, reply.text
    created: Obj = reply.json()
    return created


def test_the_chart_applies_server_side_and_the_server_validates_it(hami: Hami) -> None:
    """Every rendered object (and the TLS Secrets) was accepted by kube-apiserver's validation."""
    applied = re.findall(r"^(\S+) serverside-applied$", hami.applied, re.MULTILINE)
    kinds = {o["kind"] for o in hami.objects}
    assert len(applied) == len(hami.objects) + 2, hami.applied
    assert {"Deployment", "DaemonSet", "ClusterRole", "MutatingWebhookConfiguration"} <= kinds
    got = hami.cp.kubectl("get", "deployment,daemonset,service", "-n", names.NAMESPACE, "-o", "name")
    assert f"deployment.apps/{names.SCHEDULER_DEPLOYMENT}" in got.stdout.split()


def test_the_real_server_refuses_what_its_schema_does_not_declare(hami: Hami) -> None:
    """The same apply fails once an object carries a field Kubernetes does not know: it is the
    server, not a client-side schema, that checked the chart."""
    configmap = copy.deepcopy(next(o for o in hami.objects if o["kind"] == "ConfigMap"))
    configmap["metadata"]["name"] = "hami-conformance-bad"
    configmap["spec"] = {"unknown": True}
    done = hami.cp.kubectl(
        "apply", "--server-side", "-f", "-", input=yaml.safe_dump(configmap), check=False
    )
    assert done.returncode != 0
    assert "spec" in done.stderr and ("not declared" in done.stderr or "unknown field" in done.stderr)


def test_a_real_kube_scheduler_calls_the_extender_over_mtls_to_filter_and_bind(hami: Hami) -> None:
    """The webhook gives the GPU pod the chart's scheduler; kube-scheduler, configured by the
    chart's KubeSchedulerConfiguration, calls /filter and /bind over mutual TLS; the extender's
    Binding carries the allocation annotations and kube-apiserver copies them onto the pod."""
    cp = hami.cp
    create_pod(cp, gpu_pod("real-sched-a", 3000))
    pod = wait_bound(cp, "default", "real-sched-a", WAIT_S)
    node = pod["spec"]["nodeName"]
    assert node in hami.nodes
    assert pod["spec"]["schedulerName"] == names.SCHEDULER_DEPLOYMENT
    annos = pod["metadata"]["annotations"]
    assert annos[ann.POD_VGPU_NODE] == node
    # allocating, or success once the node's device plugin has run Allocate for it
    assert annos[ann.POD_BIND_PHASE] in (ann.BIND_PHASE_ALLOCATING, ann.BIND_PHASE_SUCCESS)
    (container, *rest) = decode_pod_devices(annos[ann.POD_DEVICES_ALLOCATED])
    assert not any(rest)
    (device,) = container
    assert device.uuid.startswith(f"GPU-{node}-") and device.usedmem == 3000  # the node's plugin's card
    # the extender served both verbs (kube-scheduler presented its client certificate)
    metrics = requests.get(hami.metrics_url + "/metrics", timeout=10).text
    assert re.search(r'hami_scheduler_filter_duration_seconds_count\{result="fit"\} [1-9]', metrics)
    assert re.search(r'hami_scheduler_bind_duration_seconds_count\{result="success"\} [1-9]', metrics)
    # and it refuses a caller without one (TLS 1.3: an alert or a closed connection after the handshake)
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.post(hami.extender_url + "/filter", json={}, verify=str(hami.files.ca), timeout=10)


def test_the_real_api_server_calls_the_webhook_through_the_charts_configuration(hami: Hami) -> None:
    """kube-apiserver calls the webhook that the chart's MutatingWebhookConfiguration names (its
    Service, its caBundle): a GPU pod is mutated as HAMi does; a pod asking for no GPU is not."""
    cp = hami.cp
    gpu = create_pod(cp, gpu_pod("webhook-gpu", 1000))
    assert gpu["spec"]["schedulerName"] == names.SCHEDULER_DEPLOYMENT
    plain = builders.pod({"name": "main", "image": "busybox"}, name="webhook-plain", namespace="default")
    created = create_pod(cp, plain)
    assert created["spec"]["schedulerName"] == "default-scheduler"
    assert [c.get("env") for c in created["spec"]["containers"]] == [None]
    assert not [k for k in (created["metadata"].get("annotations") or {}) if k.startswith("hami.io/")]
    configuration = cp.kubectl("get", "mutatingwebhookconfiguration", "-o", "json").stdout
    assert '"caBundle"' in configuration and '"service"' in configuration


def test_the_events_show_in_kubectl_as_the_guides_show_them(hami: Hami) -> None:
    """docs/guides/scheduler-debugging.md §3.1: `kubectl describe pod` lists the extender's
    FilteringFailed line from hami-scheduler; `kubectl get events` has the reasons."""
    cp = hami.cp
    create_pod(cp, gpu_pod("events-too-big", 7_000_000))
    line = re.compile(
        # the Age column of a repeated event reads "5s (x3 over 12s)"
        r"Warning\s+FilteringFailed\s+.+?\s+hami-scheduler\s+Bindingfailed: CardInsufficientMemory on node "
        + re.escape(", ".join(sorted(hami.nodes)))
    )

    def described() -> str | None:
        out = cp.kubectl("describe", "pod", "events-too-big", "-n", "default").stdout
        return out if line.search(out) else None

    wait_until(described, WAIT_S, "the FilteringFailed line in kubectl describe pod", interval=1.0)
    create_pod(cp, gpu_pod("events-fits", 1000))
    node = wait_bound(cp, "default", "events-fits", WAIT_S)["spec"]["nodeName"]

    def listed() -> str | None:
        out = cp.kubectl("get", "events", "-n", "default", "--field-selector",
                         "involvedObject.name=events-fits").stdout  # fmt: skip
        return out if "BindingSucceed" in out else None

    out = wait_until(listed, WAIT_S, "BindingSucceed in kubectl get events", interval=1.0)
    assert f"Successfully binding node [{node}] to default/events-fits" in out


def test_the_extender_leads_while_the_real_kube_scheduler_holds_the_charts_lease(hami: Hami) -> None:
    """The chart's leader election, end to end: kube-scheduler (leaderElection from the chart's
    configuration, as the chart's ServiceAccount) holds the Lease the extender follows
    (--leader-elect-resource-name), and the extender labels its pod the leader (any other replica
    follower)."""
    cp = hami.cp
    with cp.session() as s:
        leases = f"/apis/coordination.k8s.io/v1/namespaces/{names.NAMESPACE}/leases"

        def holder() -> str | None:
            lease = s.get(f"{cp.url}{leases}/{names.SCHEDULER_DEPLOYMENT}", timeout=30)
            return lease.json()["spec"].get("holderIdentity") if lease.status_code == 200 else None

        held = wait_until(holder, WAIT_S, "kube-scheduler's Lease", interval=1.0)
        assert held.startswith(socket.gethostname())

        def roles() -> dict[str, str] | None:
            url = f"{cp.url}/api/v1/namespaces/{names.NAMESPACE}/pods"
            pods = s.get(url, params={"labelSelector": "app=hami-scheduler"}, timeout=30).json()["items"]
            seen.append({p["metadata"]["name"]: p["metadata"].get("labels") or {} for p in pods})
            got = {name: labels.get(ann.SCHEDULER_ROLE_LABEL, "") for name, labels in seen[-1].items()}
            want = {name: "leader" if name == own else "follower" for name in got}
            return got if got == want else None

        own = hami.scheduler_pod["metadata"]["name"]  # the replica the extender process stands for
        seen: list[dict[str, dict[str, str]]] = []
        try:
            labels = wait_until(roles, WAIT_S, "the scheduler pods' role labels", interval=1.0)
        except AssertionError as err:
            raise AssertionError(f"{err}; last seen: {seen[-1:]}") from None
    assert labels[own] == "leader"
