"""Topology: NVML's links to HAMi's pair scores, the score annotation, and the scheduler's use of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client

from hami.core import annotations as ann
from hami.core.codec.node_devices import decode_pair_scores
from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.nvml.fake import FakeNvml
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.nvml_source import read_links
from hami.deviceplugin.topology import pair_scores
from hami.testing.extender import bind_pod, create_pod, filter_pod, running
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.pluginrig import NODE, start_rig
from hami.testing.wait import wait_until
from tests.deviceplugin.gpuboards import CUBE_MESH, board_uuid, nvlink_board, pcie_board


def _scores(spec: dict[str, Any]) -> tuple[dict[str, dict[str, int]], tuple[tuple[str, str], ...]]:
    nvml = FakeNvml(spec)
    uuids = [nvml.device(i).uuid() for i in range(nvml.device_count())]
    got = pair_scores(read_links(nvml, uuids))
    return got.scores, got.asymmetric


def test_nvlink_board_scores_links_and_pcie_paths_as_hami() -> None:
    scores, asymmetric = _scores(nvlink_board())
    u = [board_uuid("nvlink", i) for i in range(8)]
    assert asymmetric == ()
    assert scores[u[2]][u[3]] == 50 + 200  # one PCIe switch, two NVLinks
    assert scores[u[0]][u[3]] == 20 + 200  # one NUMA node, two NVLinks
    assert scores[u[0]][u[4]] == 10 + 200  # across sockets, two NVLinks
    assert scores[u[0]][u[1]] == 50 + 100
    assert scores[u[0]][u[2]] == 20 + 100
    assert scores[u[0]][u[5]] == 10  # no NVLink, across sockets
    assert all(scores[a][b] == scores[b][a] for a in u for b in u if a != b)
    assert list(scores) == u and all(len(row) == 7 for row in scores.values())


def test_pcie_board_and_nvswitch_board() -> None:
    scores, _ = _scores(pcie_board(gpus=4))
    u = [board_uuid("pcie", i) for i in range(4)]
    assert (scores[u[0]][u[1]], scores[u[0]][u[2]], scores[u[1]][u[3]]) == (50, 10, 10)
    switched = {
        "devices": [
            {"uuid": f"GPU-s{i}", "memory_mib": 81920, "numa": 0, "nvswitch_links": 18 if i else 12}
            for i in range(3)
        ]
    }
    scores, _ = _scores(switched)
    # Through NVSwitches each pair counts the fewer switch links of the two (12 or 18).
    assert scores["GPU-s0"]["GPU-s1"] == 20 + 1200 and scores["GPU-s1"]["GPU-s2"] == 20 + 1800


def test_an_asymmetric_pair_scores_zero_and_is_reported() -> None:
    spec = pcie_board(gpus=4)
    spec["devices"][0]["nvlinks"] = {1: 2}  # GPU 1 does not list the link back
    scores, asymmetric = _scores(spec)
    u = [board_uuid("pcie", i) for i in range(4)]
    assert scores[u[0]][u[1]] == scores[u[1]][u[0]] == 0
    assert asymmetric == ((u[0], u[1]),)
    assert scores[u[0]][u[2]] == 10 and scores[u[2]][u[3]] == 50


def test_the_plugin_writes_the_scores_and_warns_of_asymmetry(
    kube_api: KubeAPIServer, kube_client: Any, short_dir: Path
) -> None:
    spec = nvlink_board()
    spec["devices"][6]["nvlinks"] = {2: 1, 4: 1, 5: 2}  # GPU 6 lost its link to GPU 7
    rig = start_rig(kube_api, kube_client, short_dir, spec=spec, topology=True)
    try:
        text = wait_until(lambda: rig.node_annotations().get(ann.NODE_PAIR_SCORE), what="score annotation")
        scores = decode_pair_scores(text)
        u = [board_uuid("nvlink", i) for i in range(8)]
        assert scores[u[2]][u[3]] == 250 and scores[u[6]][u[7]] == 0
        assert text.startswith(f'[{{"uuid":"{u[0]}","score":{{"{u[1]}":150,"{u[2]}":120,')
        events = wait_until(
            lambda: [
                e
                for e in client.CoreV1Api(rig.kube_client).list_namespaced_event("default").items
                if e.reason == "AsymmetricGPUP2PLink"
            ],
            what="the asymmetry event",
        )
        assert events[0].type == "Warning" and events[0].involved_object.name == NODE
        assert f"from {u[6]} to {u[7]}" in events[0].message
    finally:
        rig.stop()


def test_a_two_gpu_topology_aware_pod_lands_on_a_linked_pair(
    kube_api: KubeAPIServer, kube_client: Any, short_dir: Path
) -> None:
    spec = nvlink_board()
    # Unlink GPUs 6 and 7: without scores the policy takes them (the last pair in its candidate
    # order), with scores only 2-3 is left with two NVLinks behind one PCIe switch.
    del spec["devices"][6]["nvlinks"][7], spec["devices"][7]["nvlinks"][6]
    cfg = PluginConfig(device_split_count=4)
    rig = start_rig(kube_api, kube_client, short_dir, cfg, spec, topology=True)
    try:
        wait_until(lambda: rig.node_annotations().get(ann.NODE_PAIR_SCORE), what="score annotation")
        with running(kube_api) as ext:
            pod = create_pod(
                kube_api,
                ext,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": "trainer",
                        "namespace": "default",
                        "annotations": {ann.POD_GPU_SCHEDULER_POLICY: "topology-aware"},
                    },
                    "spec": {
                        "containers": [
                            {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
                        ]
                    },
                    "status": {"phase": "Pending"},
                },
            )
            reply = filter_pod(ext, pod, [NODE])
            assert reply["NodeNames"] == [NODE], reply
            assert bind_pod(ext, pod, NODE) == ""  # the devices are written with the binding
        stored = kube_api.store.get("pods", "trainer", "default")
        assert stored is not None
        (chosen, *_) = decode_pod_devices(stored["metadata"]["annotations"][ann.POD_DEVICES_ALLOCATED])
        index = {board_uuid("nvlink", i): i for i in range(8)}
        a, b = sorted(index[d.uuid] for d in chosen)
        assert (a, b) == (2, 3) and CUBE_MESH[a][b] == 2
    finally:
        rig.stop()


def test_numa_nodes_reach_the_kubelet_with_enable_numa_topology(
    kube_api: KubeAPIServer, kube_client: Any, short_dir: Path
) -> None:
    cfg = PluginConfig(device_split_count=2, enable_numa_topology=True)
    rig = start_rig(kube_api, kube_client, short_dir, cfg, spec=pcie_board(gpus=4))
    try:
        channel, stub = rig.kubelet.plugin("nvidia-gpu.sock")
        with channel:
            devices = next(stub.ListAndWatch(pb.Empty())).devices
        numa = {d.ID: [n.ID for n in d.topology.nodes] for d in devices}
        assert numa == {f"{board_uuid('pcie', i)}-{r}": [i // 2] for i in range(4) for r in range(2)}
    finally:
        rig.stop()
