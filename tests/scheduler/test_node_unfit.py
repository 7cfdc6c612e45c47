"""``NodeUnfitPod`` where HAMi writes it: a ``-v=4`` log line (``score.go``: ``klog.V(4).InfoS(
common.NodeUnfitPod, "pod", …, "node", …, "reason", …)``) for a registered node whose devices do not
fit the pod. A node without a usable registration is ``node unregistered`` in FailedNodes, as in
HAMi (``scheduler.go``), and has no such line."""

from __future__ import annotations

from pathlib import Path

import requests

from hami.testing.builders import gpu_node, gpu_pod, node
from hami.testing.extender import daemon
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until


def test_v4_logs_node_unfit_pod_for_a_registered_node_only(
    kube_api: KubeAPIServer, kube_config_file: Path
) -> None:
    kube_api.store.put(gpu_node("small", gpus=1, mem=4096))
    kube_api.store.put(node("bare"))  # no hami.io/node-nvidia-register
    pod = kube_api.store.put(gpu_pod("big", mem=8192))
    with daemon(kube_config_file, "-v=4") as d:
        start = len(d.lines)
        r = requests.post(d.url + "/filter", json={"Pod": pod, "NodeNames": ["small", "bare"]}, timeout=30)
        assert r.json()["FailedNodes"] == {"small": "1/1 CardInsufficientMemory", "bare": "node unregistered"}
        wait_until(lambda: any("Node bare filtered out" in x for x in d.lines[start:]), what="the verdicts")
        unfit = [line for line in d.lines[start:] if '"NodeUnfitPod"' in line]
    assert len(unfit) == 1, unfit
    assert unfit[0].startswith("I")
    want = '] "NodeUnfitPod" pod="default/big" node="small" reason="1/1 CardInsufficientMemory"'
    assert unfit[0].endswith(want), unfit
