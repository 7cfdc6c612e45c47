"""Bind's PodGroup node-lock retry (§5.3 step 3, ``--node-lock-retry-timeout``).

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

import pytest

from hami.core.codec.nodelock import NodeLock, format_node_lock
from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.extender import bind_pod, create_pod, filter_pod, running
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until

LOCK = "hami.io/mutex.lock"


def _held_by_holder(api: KubeAPIServer) -> str:
    fresh = format_node_lock(NodeLock(datetime.now().astimezone(), "default", "holder"))
    api.store.put(gpu_node("n1", annotations={LOCK: fresh}))
    api.store.put(gpu_pod("holder"))
    return fresh


def _group_pod(name: str, how: str) -> dict[str, Any]:
    if how == "label":
        return gpu_pod(name, labels={"scheduling.x-k8s.io/pod-group": "g1"})
    pod = gpu_pod(name)
    pod["spec"]["schedulingGroup"] = {"podGroupName": "g1"}
    return pod


@pytest.mark.parametrize("how", ["label", "spec"])
def test_pod_group_member_waits_for_the_lock_and_then_binds(kube_api: KubeAPIServer, how: str) -> None:
    _held_by_holder(kube_api)
    with running(kube_api, node_lock_retry_timeout=30.0) as ext:
        pod = create_pod(kube_api, ext, _group_pod("p1", how))
        assert filter_pod(ext, pod, ["n1"])["NodeNames"] == ["n1"]
        kube_api.requests.clear()
        result: list[str] = []
        worker = threading.Thread(target=lambda: result.append(bind_pod(ext, pod, "n1")))
        worker.start()
        # It keeps re-reading the node while the holder's lock is there...
        wait_until(lambda: kube_api.requests.count(method="GET", path=r"/nodes/n1$") >= 3, what="retries")
        assert not result
        # ...and binds once the device plugin releases it.
        stored = kube_api.store.get("nodes", "n1")
        assert stored is not None
        del stored["metadata"]["annotations"][LOCK]
        kube_api.store.put(stored)
        worker.join(30)
        assert result == [""]
        bound = kube_api.store.get("pods", "p1", "default")
        assert bound is not None and bound["spec"]["nodeName"] == "n1"


def test_pod_group_retry_gives_up_at_the_deadline(kube_api: KubeAPIServer) -> None:
    fresh = _held_by_holder(kube_api)
    with running(kube_api, node_lock_retry_timeout=0.5) as ext:
        pod = create_pod(kube_api, ext, _group_pod("p1", "label"))
        filter_pod(ext, pod, ["n1"])
        error = bind_pod(ext, pod, "n1")
        assert error == "timed out after 500ms waiting for node n1 to be unlocked: node lock contention"
        assert kube_api.store.get("nodes", "n1")["metadata"]["annotations"][LOCK] == fresh  # type: ignore[index]


def test_plain_pod_and_disabled_retry_fail_at_once(kube_api: KubeAPIServer) -> None:
    _held_by_holder(kube_api)
    with running(kube_api, node_lock_retry_timeout=30.0) as ext:
        plain = create_pod(kube_api, ext, gpu_pod("plain"))
        filter_pod(ext, plain, ["n1"])
        kube_api.requests.clear()
        assert bind_pod(ext, plain, "n1") == "node n1 has been locked within 5m0s: node lock contention"
        assert kube_api.requests.count(method="GET", path=r"/nodes/n1$") == 1
    with running(kube_api, node_lock_retry_timeout=0.0) as ext:
        group = create_pod(kube_api, ext, _group_pod("g", "label"))
        filter_pod(ext, group, ["n1"])
        assert bind_pod(ext, group, "n1") == "node n1 has been locked within 5m0s: node lock contention"
