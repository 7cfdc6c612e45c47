"""The allocation lifecycle counters HAMi's master merged after v2.10 (``hami_scheduler_allocations_total``,
``_allocation_failures_total``, ``_bind_rollbacks_total``, ``_stale_reservations_total``,
``_reconciliation_errors_total``): each moves on the event it names, and only then."""

from __future__ import annotations

from datetime import UTC, datetime

import requests
from prometheus_client.parser import text_string_to_metric_families

from hami.core import annotations as ann
from hami.core.codec.nodelock import NodeLock, format_node_lock
from hami.core.objects import annotations_of
from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.extender import bind_pod, create_pod, filter_pod, metrics_text, running
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until

Key = tuple[str, frozenset[tuple[str, str]]]


def _counters(text: str) -> dict[Key, float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        if fam.name.startswith("hami_scheduler_") and fam.type == "counter"
        for s in fam.samples
        if s.name.endswith("_total")
    }


def _v(c: dict[Key, float], name: str, **labels: str) -> float:
    return c[(name, frozenset(labels.items()))]


def test_allocations_failures_rollbacks_and_stale_reservations(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))  # 2 × 8000 MiB
    with running(kube_api) as ext:
        before = _counters(metrics_text(ext))
        for name in ("hami_scheduler_allocations_total", "hami_scheduler_stale_reservations_total"):
            assert _v(before, name, device_type="NVIDIA") == 0
        for phase in ("node_lock", "bind"):
            assert _v(before, "hami_scheduler_bind_rollbacks_total", phase=phase) == 0
        for phase in ("register", "handshake", "role_label"):
            assert _v(before, "hami_scheduler_reconciliation_errors_total", phase=phase) == 0

        fits = create_pod(kube_api, ext, gpu_pod("fits", mem=3000))
        assert filter_pod(ext, fits, ["n1"])["NodeNames"] == ["n1"]
        too_big = create_pod(kube_api, ext, gpu_pod("too-big", mem=9000))
        assert not filter_pod(ext, too_big, ["n1"])["NodeNames"]
        # a reservation no bind takes: the pod goes away first
        gone = create_pod(kube_api, ext, gpu_pod("gone", mem=1000))
        assert filter_pod(ext, gone, ["n1"])["NodeNames"] == ["n1"]
        assert requests.delete(f"{kube_api.url}/api/v1/namespaces/default/pods/gone", timeout=10).ok
        # a bind that meets another (live) pod's fresh node lock is rolled back
        create_pod(kube_api, ext, gpu_pod("someone-else", mem=1000))
        lock = format_node_lock(NodeLock(datetime.now(UTC), "default", "someone-else"))
        node = kube_api.store.get("nodes", "n1")
        assert node is not None
        node["metadata"]["annotations"][ann.NODE_LOCK] = lock
        kube_api.store.put(node)
        wait_until(lambda: ann.NODE_LOCK in annotations_of(ext.state.get_node("n1") or {}), what="lock")
        assert bind_pod(ext, fits, "n1") != ""

        def moved() -> dict[Key, float] | None:
            c = _counters(metrics_text(ext))
            return c if _v(c, "hami_scheduler_stale_reservations_total", device_type="NVIDIA") == 1 else None

        after = wait_until(moved, what="the stale reservation counted")
    assert _v(after, "hami_scheduler_allocations_total", device_type="NVIDIA") == 2
    assert _v(after, "hami_scheduler_allocation_failures_total", device_type="NVIDIA",
              failure_reason="CardInsufficientMemory") == 1  # fmt: skip
    assert sum(v for (n, _), v in after.items() if n == "hami_scheduler_allocation_failures_total") == 1
    assert _v(after, "hami_scheduler_bind_rollbacks_total", phase="node_lock") == 1
    assert _v(after, "hami_scheduler_bind_rollbacks_total", phase="bind") == 0
