"""The register loop's role labels (§2.1), ``--node-label-selector`` and per-node revisits.

Section signs (§) refer to docs/design/scheduler-annotations.md.
"""

from __future__ import annotations

import gc
from typing import Any

from hami.scheduler.extender.daemon import Extender
from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.extender import filter_pod, running
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until

ROLE = "hami.io/scheduler-role"
NS = "kube-system"


def _scheduler_pod(name: str, namespace: str = NS, component: str = "hami-scheduler") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/component": component},
        },
        "spec": {"containers": [{"name": "extender", "image": "hami"}]},
        "status": {"phase": "Running"},
    }


def _role(api: KubeAPIServer, name: str, namespace: str = NS) -> str | None:
    pod = api.store.get("pods", name, namespace)
    assert pod is not None
    value: str | None = (pod["metadata"].get("labels") or {}).get(ROLE)
    return value


def _roles(api: KubeAPIServer) -> dict[str, str | None]:
    return {name: _role(api, name) for name in ("hami-0", "hami-1")}


def _register_passes(ext: Extender) -> float:
    value = ext.registry.get_sample_value("hami_scheduler_register_duration_seconds_count")
    return value or 0.0


def test_leader_labels_itself_and_the_other_replicas_then_idles(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))
    for name in ("hami-0", "hami-1"):
        kube_api.store.put(_scheduler_pod(name))
    kube_api.store.put(_scheduler_pod("other-ns", namespace="default"))
    kube_api.store.put(_scheduler_pod("kube-scheduler", component="scheduler"))
    with running(kube_api, pod_namespace=NS, pod_name="hami-0") as ext:
        wait_until(lambda: _roles(kube_api) == {"hami-0": "leader", "hami-1": "follower"}, what="role labels")
        assert _role(kube_api, "other-ns", "default") is None
        assert _role(kube_api, "kube-scheduler") is None
        wait_until(
            lambda: all(
                (ext.state.get_pod(NS, n) or {})["metadata"]["labels"].get(ROLE) for n in ("hami-0", "hami-1")
            ),
            what="cache sees the labels",
        )

        # and the node's copy too: a pass on a stale copy writes the handshake again
        def node_seen() -> bool:
            stored = kube_api.store.get("nodes", "n1")
            cached = [n for n in ext.state.node_informer.list() if n["metadata"]["name"] == "n1"]
            return stored is not None and [n["metadata"].get("annotations") for n in cached] == [
                stored["metadata"].get("annotations")
            ]

        wait_until(node_seen, what="cache sees the node's annotations")
        kube_api.requests.clear()
        ext.register.run_once()
        assert kube_api.requests.count(method="PATCH") == 0  # settled: nothing to write
        # Someone edits a label: the next tick puts it back.
        pod = kube_api.store.get("pods", "hami-1", NS)
        assert pod is not None
        pod["metadata"]["labels"][ROLE] = "leader"
        kube_api.store.put(pod)
        wait_until(
            lambda: (ext.state.get_pod(NS, "hami-1") or {})["metadata"]["labels"][ROLE] == "leader",
            what="edit seen",
        )
        ext.register.run_once()
        assert _role(kube_api, "hami-1") == "follower"


def test_role_labels_follow_the_lease_and_followers_write_none(kube_api: KubeAPIServer) -> None:
    for name in ("hami-0", "hami-1"):
        kube_api.store.put(_scheduler_pod(name))
    kube_api.store.put(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "hami-scheduler", "namespace": NS},
            "spec": {"holderIdentity": "replica-a_1", "leaseDurationSeconds": 3600},
        }
    )
    common: dict[str, Any] = {
        "leader_elect": True,
        "leader_elect_resource_name": "hami-scheduler",
        "leader_elect_resource_namespace": NS,
        "pod_namespace": NS,
    }
    with (
        running(kube_api, leader_identity="replica-a", pod_name="hami-0", **common) as a,
        running(kube_api, leader_identity="replica-b", pod_name="hami-1", **common) as b,
    ):
        wait_until(lambda: _roles(kube_api) == {"hami-0": "leader", "hami-1": "follower"}, what="a leads")
        wait_until(
            lambda: (b.state.get_pod(NS, "hami-0") or {})["metadata"]["labels"].get(ROLE), what="b sees"
        )
        kube_api.requests.clear()
        b.register.run_once()  # a follower's tick writes nothing
        assert kube_api.requests.count(method="PATCH") == 0
        lease = kube_api.store.get("leases", "hami-scheduler", NS)
        assert lease is not None
        lease["spec"]["holderIdentity"] = "replica-b_2"
        kube_api.store.put(lease)
        # The new leader relabels both replicas.
        wait_until(lambda: _roles(kube_api) == {"hami-0": "follower", "hami-1": "leader"}, what="b leads")
        wait_until(lambda: not a.leader.is_leader(), what="a follows")


def test_node_label_selector_restricts_the_registered_nodes(kube_api: KubeAPIServer) -> None:
    for name, labels in (
        ("n1", {"gpu": "on"}),
        ("n2", {"gpu": "on", "zone": "a"}),
        ("n3", {}),
        ("n4", {"gpu": "off"}),
    ):
        node = gpu_node(name)
        node["metadata"]["labels"] = labels
        kube_api.store.put(node)
    with running(kube_api, node_label_selector="gpu=on") as ext:
        assert sorted(ext.state.nodes) == ["n1", "n2"]
        assert kube_api.requests.count(method="GET", path=r"/api/v1/nodes$", labelSelector="gpu=on") >= 1
        reply = filter_pod(ext, gpu_pod("p1"), ["n3", "n4"])
        assert reply["NodeNames"] is None and set(reply["FailedNodes"]) == {"n3", "n4"}
        # A node that gains the label joins; one that loses it leaves.
        n3 = kube_api.store.get("nodes", "n3")
        assert n3 is not None
        n3["metadata"]["labels"] = {"gpu": "on"}
        kube_api.store.put(n3)
        n1 = kube_api.store.get("nodes", "n1")
        assert n1 is not None
        n1["metadata"]["labels"] = {"gpu": "off"}
        kube_api.store.put(n1)
        wait_until(lambda: sorted(ext.state.nodes) == ["n2", "n3"], what="selector membership change")


def test_a_node_change_revisits_only_that_node(kube_api: KubeAPIServer) -> None:
    for i in range(3):
        kube_api.store.put(gpu_node(f"n{i}"))
    with running(kube_api, register_tick=3600) as ext:
        passes = _register_passes(ext)
        assert passes >= 1
        changed = gpu_node("n1", gpus=4)
        stored = kube_api.store.get("nodes", "n1")
        assert stored is not None
        changed["metadata"]["annotations"].update(
            {
                k: v
                for k, v in stored["metadata"]["annotations"].items()
                if k != "hami.io/node-nvidia-register"
            }
        )
        kube_api.store.put(changed)
        wait_until(lambda: len(ext.state.nodes["n1"].devices) == 4, what="n1 re-registered")
        kube_api.store.remove("nodes", "n2")
        wait_until(lambda: "n2" not in ext.state.nodes and "n2" not in ext.state.records, what="n2 forgotten")
        assert _register_passes(ext) == passes  # no full pass over every node was needed


def test_the_caches_are_frozen_before_the_extender_reports_synced(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))
    threshold = gc.get_threshold()
    gc.unfreeze()
    try:
        with running(kube_api, gc_freeze=True) as ext:
            assert gc.get_freeze_count() > 0
            # The state and its node record exist before the freeze and are never replaced (the
            # node's JSON is: the handshake the first pass writes comes back as a new object).
            record = ext.state.nodes["n1"]
            assert gc.is_tracked(record) and gc.is_tracked(ext.state)
            assert not any(o is ext.state or o is record for o in gc.get_objects())
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
