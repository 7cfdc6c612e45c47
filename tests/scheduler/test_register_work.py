"""Which node updates give the register pass work: a bind's node lock, set and released on every
bind, must not; a change to what the pass reads must."""

from __future__ import annotations

from kubernetes import client
from prometheus_client import CollectorRegistry

from hami.core import annotations as ann
from hami.scheduler.engine.decision import FilterConfig
from hami.scheduler.extender.metrics import SchedulerMetrics
from hami.scheduler.extender.state import ClusterState
from hami.testing.builders import gpu_node
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until


def test_only_changes_the_register_pass_reads_make_a_node_dirty(
    kube_api: KubeAPIServer, kube_client: client.ApiClient
) -> None:
    for name in ("locked", "changed"):
        kube_api.store.put(gpu_node(name, gpus=1, mem=4096))
    state = ClusterState(kube_client, FilterConfig().nvidia, SchedulerMetrics(CollectorRegistry()))
    state.start()
    core = client.CoreV1Api(kube_client)
    try:
        assert state.wait_for_informers(10)
        state.take_register_work()  # the initial adds
        dirty: set[str] = set()

        def after(node: str) -> set[str]:
            """Dirty nodes once ``node``'s update has been handled (one watch: events in order)."""
            def seen() -> bool:
                dirty.update(state.take_register_work()[1])
                return node in dirty
            wait_until(seen, what=f"{node} dirty")
            found = set(dirty)
            dirty.clear()
            return found

        core.patch_node("locked", {"metadata": {"annotations": {ann.NODE_LOCK: "2026-01-01T00:00:00Z,ns,p"}}})
        core.patch_node("changed", {"metadata": {"annotations": {ann.NODE_DEVICE_CORDON: "GPU-0"}}})
        assert after("changed") == {"changed"}
        core.patch_node("locked", {"metadata": {"annotations": {ann.NODE_LOCK: None}}})
        core.patch_node_status("changed", {"status": {"allocatable": {"nvidia.com/gpu": "0"}}})
        assert after("changed") == {"changed"}
        # the same node, once something the pass reads changes with the lock
        core.patch_node("locked", {"metadata": {"annotations": {
            ann.NODE_LOCK: "2026-01-01T00:00:00Z,ns,p", ann.NODE_DEVICE_CORDON: "GPU-0",
        }}})
        assert after("locked") == {"locked"}
    finally:
        state.stop()
