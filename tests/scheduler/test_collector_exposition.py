"""The extender's state families render exactly as prometheus_client renders the same families, and
/metrics serves them on both paths (rendered text, and the collector path for ``name[]``)."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime

import pytest
import requests
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OM_TYPE
from prometheus_client.openmetrics.exposition import generate_latest as om_latest
from prometheus_client.parser import text_string_to_metric_families

from hami.core import annotations as ann
from hami.core.codec.mig import decode_mig_allocations, encode_mig_allocations
from hami.core.codec.nodelock import NodeLock, format_node_lock
from hami.core.objects import annotations_of
from hami.core.serve.families import Family, TextRenderer, to_metric
from hami.scheduler.extender.daemon import Extender
from hami.scheduler.extender.families import state_families
from hami.testing.builders import gpu_node, gpu_pod, mig_node
from hami.testing.extender import bind_pod, create_pod, filter_pod, running
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until

MIG_KEY = "hami.io/vgpu-mig-allocations"


class Fixed:
    def __init__(self, fams: list[Family]) -> None:
        self.fams = fams

    def collect(self) -> Iterator[Metric]:
        return iter([to_metric(f) for f in self.fams])


def reference(fams: list[Family], openmetrics: bool) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(fams))
    if openmetrics:
        return om_latest(registry).removesuffix(b"# EOF\n")
    return generate_latest(registry)


def rows(fams: list[Family], name: str) -> int:
    return sum(len(f.rows) for f in fams if f.name == name)


@pytest.fixture(params=[False, True], ids=["current", "legacy"])
def populated(request: pytest.FixtureRequest, kube_api: KubeAPIServer) -> Iterator[Extender]:
    """A T4 node with a bound pod, a MIG node with a realised MIG pod, and a memory quota."""
    kube_api.store.put(gpu_node("n1"))
    kube_api.store.put(mig_node("mig1"))
    kube_api.store.put({
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": "default"},
        "spec": {"hard": {"limits.nvidia.com/gpumem": "30000"}},
    })
    with running(kube_api, legacy_metrics=request.param) as ext:
        shared = create_pod(kube_api, ext, gpu_pod("p1", mem=3000, cores=30))
        assert filter_pod(ext, shared, ["n1"])["NodeNames"] == ["n1"]
        assert bind_pod(ext, shared, "n1") == ""
        mig = create_pod(kube_api, ext, gpu_pod("m1", gpus=2, mem=8000))
        assert filter_pod(ext, mig, ["mig1"])["NodeNames"] == ["mig1"]
        assert bind_pod(ext, mig, "mig1") == ""
        stored = kube_api.store.get("pods", "m1", "default")
        assert stored is not None
        allocs = decode_mig_allocations(stored["metadata"]["annotations"][MIG_KEY])
        realised = [
            replace(a, mig_uuid=f"MIG-{i}", gpu_instance_id=3 + i, compute_instance_id=0)
            for i, a in enumerate(allocs)
        ]
        stored["metadata"]["annotations"][MIG_KEY] = encode_mig_allocations(realised)
        kube_api.store.put(stored)
        wait_until(
            lambda: rows(ext.collector.families(), "hami_node_gpu_mig_instance_info") == 2,
            what="the MIG identities in the caches",
        )
        yield ext


def test_rendered_text_equals_prometheus_client_rendering(populated: Extender) -> None:
    ext = populated
    fams = ext.collector.families()
    assert [f.name for f in fams] == [f.name for f in state_families(ext.opts.legacy_metrics)]
    # MIG and non-MIG devices and the quota each contribute series
    assert rows(fams, "hami_gpu_memory_limit_bytes") == 3 and rows(fams, "hami_resource_quota_limit") == 1
    vgpu = {r[1][1:3] for f in fams if f.name == "hami_vgpu_memory_allocated_bytes" for r in f.rows}
    assert vgpu == {("n1", "p1"), ("mig1", "m1")}
    assert rows(fams, "nodeGPUMigInstance") == (2 if ext.opts.legacy_metrics else 0)
    renderer = TextRenderer()
    for _ in range(2):  # a cold cache, then a warm one
        for om in (False, True):
            assert b"".join(renderer.render(fams, om)) == reference(fams, om)


def test_collector_render_equals_the_collector_path_as_nodes_and_pods_change(
    populated: Extender, kube_api: KubeAPIServer,
) -> None:
    """``render()`` keeps each node's and pod's text between scrapes: it must still be the bytes
    prometheus_client writes for ``families()`` after a reservation comes, changes and goes."""
    ext = populated
    frozen = datetime.now().astimezone()
    ext.collector.now = lambda: frozen  # handshake ages: the same in both renderings

    def same() -> None:
        for om in (False, True):  # the text cache is shared by both formats
            assert b"".join(ext.collector.render(om)) == reference(ext.collector.families(), om)

    same()
    same()  # every node and pod from the cache
    pod = create_pod(kube_api, ext, gpu_pod("p2", mem=1000, cores=10))
    assert filter_pod(ext, pod, ["n1"])["NodeNames"] == ["n1"]  # n1's usage changes, a pod appears
    same()
    assert any(line.startswith("hami_vgpu_memory_allocated_bytes{") and 'pod="p2"' in line
               for line in b"".join(ext.collector.render(False)).decode().splitlines())
    ext.state.drop_reservation(pod["metadata"]["uid"])
    same()
    assert b'pod="p2"' not in b"".join(ext.collector.render(False))
    assert requests.delete(f"{kube_api.url}/api/v1/nodes/n1", timeout=10).ok  # its text goes with it
    wait_until(lambda: "n1" not in ext.state.nodes, what="n1 unregistered")
    same()
    limits = [line for line in b"".join(ext.collector.render(False)).decode().splitlines()
              if line.startswith("hami_gpu_memory_limit_bytes{")]
    assert limits and not [line for line in limits if 'node="n1"' in line]


def _scraped(ext: Extender) -> bytes:
    """One plain scrape as Prometheus makes it (gzip), decompressed here: Python's gzip checks the
    member's CRC and length."""
    assert ext.metrics_server is not None
    r = requests.get(ext.metrics_server.url + "/metrics", headers={"Accept-Encoding": "gzip"}, timeout=10,
                     stream=True)
    assert r.headers["Content-Encoding"] == "gzip"
    return gzip.decompress(r.raw.read(decode_content=False))


def _annotate(kube_api: KubeAPIServer, ext: Extender, node: str, key: str, value: str | None) -> None:
    """Set (or, with None, remove) one annotation of a node and wait until the extender sees it."""
    stored = kube_api.store.get("nodes", node)
    assert stored is not None
    annos = stored["metadata"].setdefault("annotations", {})
    if value is None:
        annos.pop(key, None)
    else:
        annos[key] = value
    kube_api.store.put(stored)
    wait_until(
        lambda: annotations_of(ext.state.get_node(node)).get(key) == value,
        what=f"{node}'s {key} in the cache",
    )


def test_gzip_scrape_carries_the_collector_path_text_as_the_cluster_changes(
    populated: Extender, kube_api: KubeAPIServer,
) -> None:
    """What a scrape sends compressed is, once decompressed, prometheus_client's text for the same
    families, while the texts kept between scrapes go stale one by one: a device's usage, a node's
    lock, a node added and removed, a pod reserved, bound and gone."""
    ext = populated
    frozen = datetime.now().astimezone()
    ext.collector.now = lambda: frozen

    def same() -> bytes:
        # The register pass and the watches run on: compare only a scrape that the collector path
        # reads the same before and after (a handshake or a bind's lock can land in between).
        for _ in range(50):
            expected = reference(ext.collector.families(), False)
            body = _scraped(ext)
            if reference(ext.collector.families(), False) == expected:
                assert body[: len(expected)] == expected
                return body
        raise AssertionError("the collector path never held still for one scrape")

    same()
    same()  # everything from the texts kept by the first scrape
    pending = b'hami_scheduler_pending_pods{namespace="default",reason="%s"} %s.0'
    assert pending % (b"Bound", b"2") in same()  # p1 and m1: bound, still Pending
    pod = create_pod(kube_api, ext, gpu_pod("p2", mem=1000, cores=10))
    wait_until(lambda: ext.state.get_pod("default", "p2") is not None, what="p2 in the cache")
    assert pending % (b"NotFiltered", b"1") in same()  # counted from the pod's add event
    assert filter_pod(ext, pod, ["n1"])["NodeNames"] == ["n1"]  # one device's usage, a new reservation
    body = same()
    assert b'pod="p2"' in body and pending % (b"WaitingForBind", b"1") in body
    lock = format_node_lock(NodeLock(frozen, "default", "p2"))
    _annotate(kube_api, ext, "n1", ann.NODE_LOCK, lock)  # held by a pod that exists: node_lock
    assert b'hami_scheduler_node_schedulable{node="n1",reason="node_lock"} 0.0' in same()
    assert b'hami_scheduler_node_lock_held{node="n1"} 1.0' in same()
    _annotate(kube_api, ext, "n1", ann.NODE_LOCK, None)
    assert b'hami_scheduler_node_lock_held{node="n1"}' not in same()
    kube_api.store.put(gpu_node("n2", gpus=3))  # a node joins: its devices and its node lines
    wait_until(lambda: "n2" in ext.state.nodes, what="n2 registered")
    assert b'hami_gpu_memory_limit_bytes{device_index="2",device_type="NVIDIA-Tesla T4",' in same()
    assert b'hami_scheduler_node_schedulable{node="n2",reason="ok"} 1.0' in same()
    assert bind_pod(ext, pod, "n1") == ""  # the pod bound: its pending reason, the same usage
    wait_until(lambda: (ext.state.get_pod("default", "p2") or {}).get("spec", {}).get("nodeName"),
               what="p2 bound in the cache")
    assert pending % (b"Bound", b"3") in same()
    assert requests.delete(f"{kube_api.url}/api/v1/namespaces/default/pods/p2", timeout=10).ok
    wait_until(lambda: ext.state.usage.get(pod["metadata"]["uid"]) is None, what="p2's reservation gone")
    body = same()
    assert b'pod="p2"' not in body and pending % (b"Bound", b"2") in body
    assert b'reason="WaitingForBind"' not in body and b'reason="NotFiltered"' not in body
    assert requests.delete(f"{kube_api.url}/api/v1/nodes/n2", timeout=10).ok
    wait_until(lambda: "n2" not in ext.state.nodes, what="n2 unregistered")
    assert b'node="n2"' not in same()


def _keys(text: str, names: set[str]) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {
        (s.name, tuple(sorted(s.labels.items())))
        for f in text_string_to_metric_families(text) for s in f.samples if s.name in names
    }


def test_metrics_serves_the_state_families_on_both_paths(populated: Extender) -> None:
    ext = populated
    assert ext.metrics_server is not None
    url = ext.metrics_server.url + "/metrics"
    names = {f.name for f in state_families(ext.opts.legacy_metrics)}
    expected = _keys(reference(ext.collector.families(), False).decode(), names)
    plain = requests.get(url, timeout=10)
    assert plain.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert _keys(plain.text, names) == expected
    om = requests.get(url, headers={"Accept": OM_TYPE}, timeout=10)
    assert om.headers["Content-Type"].startswith("application/openmetrics-text")
    assert om.text.endswith("# EOF\n") and om.text.count("# EOF") == 1
    # name[] takes the collector path: only the asked-for families, from collect()
    only = ["hami_gpu_memory_limit_bytes", "hami_node_gpu_mig_instance_info"]
    filtered = requests.get(url, params={"name[]": only}, timeout=10).text
    assert _keys(filtered, names) == {k for k in expected if k[0] in only}
    assert {f.name for f in text_string_to_metric_families(filtered)} == set(only)
