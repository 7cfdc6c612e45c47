"""Mixed clusters: HAMi's scheduler on nodes our device plugin registered, ours on nodes registered in
HAMi's device plugin's format, and a switch-over from one scheduler to the other with pods placed.

Skipped only when HAMi's source is absent (``hami.testing.hamipeer.ABSENT``)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from hami.core import annotations as ann
from hami.core.codec.pod_devices import decode_pod_devices
from hami.deviceplugin.config import PluginConfig
from hami.testing import apiside, hamipeer, metricdiff, podstream, sidebyside
from hami.testing.builders import limits
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.pluginrig import NODE, U0, U1, start_rig
from hami.testing.processes import ProcessGroup
from hami.testing.wait import wait_until

SRC = hamipeer.source()
pytestmark = pytest.mark.skipif(SRC is None, reason=hamipeer.ABSENT)
NOW = datetime(2026, 1, 1, tzinfo=UTC)
# HAMi's device plugin's own serialisation of hami.io/node-nvidia-register (Go's field order, with
# "devicevendor"), as HAMi's scheduler tests write it (pkg/scheduler/register_race_test.go).
HAMI_GPU0, HAMI_GPU1 = "GPU-7a1b0000-0000-4000-8000-000000000000", "GPU-7a1b0001-0000-4000-8000-000000000001"
HAMI_REGISTER = (
    f'[{{"id":"{HAMI_GPU0}","count":10,"devmem":40960,"devcore":100,'
    '"type":"NVIDIA-NVIDIA A100-SXM4-40GB","health":true,"mode":"hami-core","numa":0,"index":0,'
    '"devicevendor":"NVIDIA"},'
    f'{{"id":"{HAMI_GPU1}","count":10,"devmem":40960,"devcore":100,'
    '"type":"NVIDIA-NVIDIA A100-SXM4-40GB","health":true,"mode":"hami-core","numa":1,"index":1,'
    '"devicevendor":"NVIDIA"}]'
)
# What both schedulers export about placements: equal after a switch-over.
PLACEMENT_FAMILIES = (
    "hami_gpu_memory_allocated_bytes", "hami_gpu_core_allocated_ratio", "hami_gpu_shared_count",
    "hami_vgpu_memory_allocated_bytes", "hami_vgpu_core_allocated_ratio", "hami_resource_quota_used",
)  # fmt: skip


@dataclass
class Peers:
    """HAMi's built scheduler, its chart's setup, and the processes started (stopped at the end)."""

    binary: Path
    setup: hamipeer.ChartSetup
    group: ProcessGroup
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    leases: set[str] = field(default_factory=set)

    def start(self, which: str, api: KubeAPIServer) -> apiside.Side:
        if api.url not in self.leases:  # the chart's lease, as its kube-scheduler would hold it
            self.stack.enter_context(hamipeer.LeaseKeeper(api.url))
            self.leases.add(api.url)
        kubeconfig = self.group.log_dir / f"{which}-kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()), encoding="utf-8")
        ext = hamipeer.start(which, self.group, kubeconfig, self.setup, binary=self.binary, verbosity=1,
                             extra_flags=["--kube-qps=-1"])  # fmt: skip
        return apiside.Side(which, api.url, ext.url, ext.metrics_url)


@pytest.fixture(scope="module")
def built() -> tuple[Path, hamipeer.ChartSetup]:
    assert SRC is not None
    return hamipeer.build(SRC), hamipeer.chart_setup(SRC)


@pytest.fixture
def peers(built: tuple[Path, hamipeer.ChartSetup], tmp_path: Path) -> Iterator[Peers]:
    p = Peers(*built, ProcessGroup(tmp_path / "logs"))
    try:
        yield p
    finally:
        p.group.stop()
        p.stack.close()


def _pod(name: str, mem: int, cores: int, gpus: int = 1, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"schedulerName": podstream.SCHEDULER, "containers": [
            {"name": "main", "image": "cuda", "resources": {"limits": limits(gpus, mem, cores)}}]},
    }  # fmt: skip


def _place(side: apiside.Side, pod: dict[str, Any], nodes: list[str]) -> sidebyside.Outcome:
    return sidebyside.outcome(side, side.create(pod), nodes)


def test_hami_schedules_on_nodes_our_device_plugin_registered(
    kube_api: KubeAPIServer, kube_client: Any, tmp_path: Path, peers: Peers
) -> None:
    cfg = PluginConfig(device_split_count=4, operating_mode="hami-core")
    rig = start_rig(kube_api, kube_client, tmp_path, cfg)
    try:
        hami = peers.start("hami", kube_api)
        apiside.wait_ready(hami, 2)
        placed = _place(hami, _pod("on-our-plugin", 20000, 30, gpus=2), [NODE])
        assert placed.node == NODE, placed
        devices = decode_pod_devices(placed.devices)
        assert {d.uuid for c in devices for d in c} == {U0, U1}
        assert all(d.usedmem == 20000 and d.usedcores == 30 for c in devices for d in c)
        # the device plugin accepts HAMi's placement: Allocate on the kubelet stand-in succeeds
        pod = client.CoreV1Api(kube_client).read_namespaced_pod("on-our-plugin", "default")
        assert pod.metadata.annotations[ann.POD_DEVICES_TO_ALLOCATE]
    finally:
        rig.stop()


@pytest.mark.parametrize("which", ["hami", "ours"])
def test_both_schedule_on_nodes_in_hamis_register_format(which: str, kube_api: KubeAPIServer,
                                                        peers: Peers) -> None:  # fmt: skip
    node = copy.deepcopy(podstream.cluster_nodes(NOW, podstream.CLUSTER[:1])[0])
    node["metadata"]["annotations"][ann.NODE_REGISTER] = HAMI_REGISTER
    node["metadata"]["annotations"].pop(ann.NODE_PAIR_SCORE, None)
    apiside.seed(kube_api.url, [node], [])
    side = peers.start(which, kube_api)
    apiside.wait_ready(side, 2)
    name = node["metadata"]["name"]
    first = _place(side, _pod("a", 30000, 50), [name])
    second = _place(side, _pod("b", 30000, 50), [name])
    exclusive = _place(side, _pod("c", 1000, 100), [name])
    assert (first.node, second.node, exclusive.node) == (name, name, "")
    uuids = [decode_pod_devices(o.devices)[0][0].uuid for o in (first, second)]
    # HAMi's default GPU policy (spread, from its chart) puts the second pod on the other card
    assert sorted(uuids) == [HAMI_GPU0, HAMI_GPU1]
    assert [n for n, _ in exclusive.failed] == [name], exclusive


@pytest.mark.parametrize("first,then", [("hami", "ours"), ("ours", "hami")])
def test_switch_over_keeps_the_accounting(first: str, then: str, kube_api: KubeAPIServer,
                                          peers: Peers) -> None:  # fmt: skip
    apiside.seed(kube_api.url, podstream.cluster_nodes(NOW), [podstream.quota()])
    gpus = sum(s.gpus for s in podstream.CLUSTER)
    nodes = [s.name for s in podstream.CLUSTER]
    side = peers.start(first, kube_api)
    apiside.wait_ready(side, gpus, [podstream.QUOTA_NS])
    placed = 0
    for step in podstream.stream(7, 60, lifetime=(1000, 1000)):
        placed += _place(side, step.pod, nodes).placed
    assert placed > 20
    before = metricdiff.families(_settled(side, first), lambda n: n in PLACEMENT_FAMILIES)
    peers.group.stop()
    other = peers.start(then, kube_api)
    apiside.wait_ready(other, gpus, [podstream.QUOTA_NS])
    after = metricdiff.families(_settled(other, then), lambda n: n in PLACEMENT_FAMILIES)
    rows = metricdiff.compare(before, after)
    print(metricdiff.table(rows))
    assert {r.name for r in rows} == set(PLACEMENT_FAMILIES)
    assert [r for r in rows if r.status != "same"] == []


def _scrape(side: apiside.Side) -> str:
    return side.session.get(side.metrics + "/metrics", timeout=30).text


def _settled(side: apiside.Side, tag: str) -> str:
    """A scrape whose per-card families count the reservations. HAMi computes them at its register
    passes (every 15 s, or when a node is added), ours at scrape time: a node is added, then the
    card memory must be non-zero and the same in two scrapes in a row."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"settle-{tag}"}}
    side.session.post(f"{side.api}/api/v1/nodes", json=node, timeout=30).raise_for_status()
    last: list[float] = [-1.0]

    def check() -> str | None:
        text = _scrape(side)
        total = sum(metricdiff.families(text)["hami_gpu_memory_allocated_bytes"].samples.values())
        stable, last[0] = total == last[0] and total > 0, total
        return text if stable else None

    return wait_until(check, 60.0, f"{side.name}'s card metrics to count the reservations", interval=0.5)
