"""Every branch of the pod-pending tree (docs/guides/scheduler-debugging.md §7,
docs/guides/device-plugin-debugging.md §6) against the emulator."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hami.testing.builders import event
from hami.testing.kubeapi import KubeAPIServer
from tests.doctor.doctorcluster import OLD_HANDSHAKE, codes, hami_node, hami_pod, run_json, scheduler_pod

Seed = Callable[[KubeAPIServer], None]


def _put(api: KubeAPIServer, *objs: dict[str, Any]) -> None:
    for obj in objs:
        api.store.put(obj)


def healthy(api: KubeAPIServer, *objs: dict[str, Any]) -> None:
    """A running scheduler and two registered nodes, plus the given objects."""
    _put(api, scheduler_pod(), hami_node("gpu-node-01"), hami_node("gpu-node-02"), *objs)


def filter_failed(message: str, **kw: Any) -> Seed:
    return lambda api: healthy(api, hami_pod("p"), event("p", "FilteringFailed", message, **kw))


CASES: dict[str, tuple[Seed, int, str]] = {
    # C2/C3: no HAMi resources.
    "no-resources": (
        lambda api: healthy(api, hami_pod("p", resources={"cpu": "1"})), 2, "pod.resources.none"
    ),
    "gpumem-not-integer": (
        lambda api: healthy(
            api, hami_pod("p", resources={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8Gi"})
        ),
        2,
        "pod.resources.invalid",
    ),
    "gpumem-without-gpu": (
        lambda api: healthy(api, hami_pod("p", resources={"nvidia.com/gpumem": "4096"})),
        2,
        "pod.resources.no-gpu-count",
    ),
    # C4/C5: wrong schedulerName.
    "scheduler-name": (
        lambda api: healthy(api, hami_pod("p", scheduler="default-scheduler")),
        2,
        "pod.scheduler-name.wrong",
    ),
    # C/C1: scheduler not running.
    "scheduler-missing": (
        lambda api: _put(api, hami_node("gpu-node-01"), hami_pod("p")), 2, "scheduler.missing"
    ),
    "scheduler-crashloop": (
        lambda api: _put(api, scheduler_pod(waiting="CrashLoopBackOff"), hami_pod("p")),
        2,
        "scheduler.not-running",
    ),
    "scheduler-guide-label": (
        lambda api: _put(api, scheduler_pod(label="app", role=""), hami_node("gpu-node-01"), hami_pod("p")),
        1,
        "pod.events.none",
    ),
    "scheduler-no-leader": (
        lambda api: _put(api, scheduler_pod(role="follower"), hami_node("gpu-node-01"), hami_pod("p")),
        1,
        "scheduler.no-leader",
    ),
    # C6: everything right but no HAMi event.
    "no-events": (lambda api: healthy(api, hami_pod("p")), 1, "pod.events.none"),
    # docs/guides/device-plugin-debugging.md §6 PEND1 → PEND3/PEND5.
    "insufficient-no-allocatable": (
        lambda api: _put(
            api,
            scheduler_pod(),
            hami_node("gpu-node-01", gpus=0),
            hami_pod("p"),
            event(
                "p",
                "FailedScheduling",
                "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
                source="hami-scheduler",
            ),
        ),
        2,
        "pod.insufficient.no-allocatable",
    ),
    "insufficient-all-used": (
        lambda api: healthy(
            api,
            hami_pod("p"),
            event("p", "FailedScheduling", "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."),
        ),
        2,
        "pod.insufficient.all-used",
    ),
    # D → E1..E5: the reason codes of docs/guides/scheduler-debugging.md §4, in the scheduler's aggregated
    # event form.
    "NodeInsufficientDevice": (
        filter_failed("1 nodes NodeInsufficientDevice(gpu-node-01)"),
        2,
        "pod.filter.NodeInsufficientDevice",
    ),
    "CardInsufficientMemory": (
        filter_failed("2 nodes CardInsufficientMemory(gpu-node-01,gpu-node-02)"),
        2,
        "pod.filter.CardInsufficientMemory",
    ),
    "ExclusiveDeviceAllocateConflict": (
        filter_failed("1 nodes ExclusiveDeviceAllocateConflict(gpu-node-02)"),
        2,
        "pod.filter.ExclusiveDeviceAllocateConflict",
    ),
    "ResourceQuotaNotFit": (
        filter_failed("2 nodes ResourceQuotaNotFit(gpu-node-01,gpu-node-02)"),
        2,
        "pod.filter.ResourceQuotaNotFit",
    ),
    "guide-example-message": (
        filter_failed("Bindingfailed: CardInsufficientMemory on node gpu-node-01"),
        2,
        "pod.filter.CardInsufficientMemory",
    ),
    "unparsed-filter-error": (filter_failed("calcScore failed boom for pod p"), 2, "pod.filter.error"),
    # E4 → F → F1: NodeUnfitPod on a node without registration.
    "unfit-unregistered": (
        lambda api: _put(
            api,
            scheduler_pod(),
            hami_node("gpu-node-01", register=None),
            hami_pod("p"),
            event("p", "FilteringFailed", "1 nodes NodeUnfitPod(gpu-node-01)"),
        ),
        2,
        "node.register.missing",
    ),
    # Only "no available node": nodes are unregistered (no per-reason event) → F, G.
    "no-node-undecodable": (
        lambda api: _put(
            api,
            scheduler_pod(),
            hami_node("gpu-node-01", register="GPU-0,10,32768,100,NVIDIA,0,true:"),
            hami_pod("p"),
            event("p", "FilteringFailed", "no available node, 1 nodes do not meet"),
        ),
        2,
        "node.register.undecodable",
    ),
    "no-node-handshake-expired": (
        lambda api: _put(
            api,
            scheduler_pod(),
            hami_node("gpu-node-01", handshake=OLD_HANDSHAKE, gpus=0),
            hami_pod("p"),
            event("p", "FilteringFailed", "no available node, 1 nodes do not meet"),
        ),
        2,
        "node.handshake.expired",
    ),
    # G → G2: annotations fine.
    "unfit-annotations-ok": (
        filter_failed("1 nodes NodeUnfitPod(gpu-node-01)"),
        2,
        "pod.filter.annotations-ok",
    ),
    # H: BindingFailed.
    "bind-lock-contention": (
        lambda api: _put(
            api,
            scheduler_pod(),
            hami_node("gpu-node-01", lock="2025-06-13T09:09:00Z,team-a,other"),
            hami_pod("other", "team-a"),
            hami_pod("p"),
            event("p", "BindingFailed", "node gpu-node-01 has been locked within 5m0s: node lock contention"),
        ),
        2,
        "node.lock.other",
    ),
    "bind-failed-api": (
        lambda api: healthy(api, hami_pod("p"), event("p", "BindingFailed", 'pods "p" is forbidden')),
        2,
        "pod.bind.failed",
    ),
    # I: FilteringSucceed but still Pending.
    "filter-succeeded-pending": (
        lambda api: healthy(
            api,
            hami_pod("p"),
            event(
                "p",
                "FilteringFailed",
                "1 nodes CardInsufficientMemory(gpu-node-01)",
                at="2025-06-13T09:08:00Z",
            ),
            event(
                "p",
                "FilteringSucceed",
                "find fit hami_node(gpu-node-01), 1 nodes not fit, 1 nodes fit(gpu-node-01:3.00)",
                type_="Normal",
            ),
        ),
        1,
        "pod.pending-after-filter",
    ),
    # Bind phase.
    "bind-allocating-stuck": (
        lambda api: healthy(
            api,
            hami_pod(
                "p",
                node_name="gpu-node-01",
                annotations={
                    "hami.io/bind-phase": "allocating",
                    "hami.io/bind-time": "1749805200",  # 09:00:00Z, 10 min ago
                    "hami.io/vgpu-node": "gpu-node-01",
                },
            ),
        ),
        2,
        "pod.bind-phase.stuck",
    ),
    "bind-failed-phase": (
        lambda api: healthy(
            api,
            hami_pod(
                "p",
                node_name="gpu-node-01",
                annotations={"hami.io/bind-phase": "failed", "hami.io/bind-time": "1749805770"},
            ),
        ),
        2,
        "pod.bind-phase.failed",
    ),
    "bind-allocating": (
        lambda api: _put(
            api,
            scheduler_pod(),
            hami_node("gpu-node-01", lock="2025-06-13T09:09:30Z,default,p"),
            hami_pod(
                "p",
                node_name="gpu-node-01",
                annotations={"hami.io/bind-phase": "allocating", "hami.io/bind-time": "1749805770"},
            ),
        ),
        0,
        "node.lock.held",
    ),
    "bind-success": (
        lambda api: healthy(
            api,
            hami_pod(
                "p",
                node_name="gpu-node-01",
                phase="Running",
                annotations={"hami.io/bind-phase": "success", "hami.io/bind-time": "1749805770"},
            ),
        ),
        0,
        "pod.bind-phase.success",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_pod_tree_branch(case: str, api: KubeAPIServer, kube_config_file: Path) -> None:
    seed, want_exit, want_code = CASES[case]
    seed(api)
    code, doc = run_json(kube_config_file, "pod", "default/p")
    found = codes(doc)
    assert want_code in found, found
    assert code == want_exit == doc["exit_code"], found
    # The walk stops at the diagnosis: nothing is reported after the first broken finding's step.
    if want_exit == 2:
        assert doc["status"] == "broken"


def test_stuck_bind_offers_clearing_the_expired_lock(api: KubeAPIServer, kube_config_file: Path) -> None:
    healthy(
        api,
        hami_node("gpu-node-03", lock="2025-06-13T09:00:00Z,default,p"),
        hami_pod(
            "p",
            node_name="gpu-node-03",
            annotations={"hami.io/bind-phase": "allocating", "hami.io/bind-time": "1749805200"},
        ),
    )
    code, doc = run_json(kube_config_file, "pod", "default/p")
    findings = doc["sections"][0]["findings"]
    lock = next(f for f in findings if f["code"] == "node.lock.expired")
    assert lock["remedy"]["annotation"] == "hami.io/mutex.lock"
    assert lock["summary"].startswith("gpu-node-03: node lock held by default/p for 10m0s")
    assert code == 2


def test_stops_at_the_first_broken_step(api: KubeAPIServer, kube_config_file: Path) -> None:
    """No resources: the scheduler is not even looked at (the tree ends at C3)."""
    _put(api, hami_pod("p", resources={}))
    code, doc = run_json(kube_config_file, "pod", "default/p")
    assert codes(doc) == ["pod.resources.none"]
    assert code == 2


def test_lease_stale_and_fresh(api: KubeAPIServer, kube_config_file: Path) -> None:
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "hami-scheduler", "namespace": "kube-system"},
        "spec": {
            "holderIdentity": "hami-scheduler-7d9f_1",
            "leaseDurationSeconds": 15,
            "renewTime": "2025-06-13T09:08:00.000000Z",
        },
    }
    healthy(api, hami_pod("p"), lease)
    lease_flag = ("--scheduler-lease", "kube-system/hami-scheduler")
    code, doc = run_json(kube_config_file, "pod", "default/p", *lease_flag)
    assert "scheduler.lease.stale" in codes(doc) and code == 1
    lease["spec"]["renewTime"] = "2025-06-13T09:09:55.000000Z"
    api.store.put(lease)
    code, doc = run_json(kube_config_file, "pod", "default/p", *lease_flag)
    assert "scheduler.lease.ok" in codes(doc)
    code, doc = run_json(kube_config_file, "pod", "default/p", "--scheduler-lease", "kube-system/nope")
    assert "scheduler.lease.missing" in codes(doc) and code == 1


def test_custom_scheduler_name(api: KubeAPIServer, kube_config_file: Path) -> None:
    healthy(api, hami_pod("p", scheduler="my-hami"))
    code, doc = run_json(kube_config_file, "pod", "default/p", "--scheduler-name", "my-hami")
    assert "pod.scheduler-name.ok" in codes(doc) and code == 1  # no HAMi events yet
