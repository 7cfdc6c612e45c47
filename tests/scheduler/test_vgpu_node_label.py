"""``hami.io/vgpu-node`` as a pod label. HAMi's filter patch sets it and HAMi's vGPU monitor (in HAMi's
device-plugin pod) lists pods by it; here the allocation rides in the Binding, which cannot carry
labels. This project's device plugin sets the label on the Allocate patch it writes anyway
(tests/deviceplugin/test_allocate.py); a cluster that keeps HAMi's device plugin runs the scheduler
with --vgpu-node-label, which costs one pod patch per bind."""

from __future__ import annotations

import pytest

from hami.core import annotations as ann
from hami.scheduler.extender.main import build_parser, options
from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.extender import bind_pod, create_pod, filter_pod, running
from hami.testing.kubeapi import KubeAPIServer


def _labels(api: KubeAPIServer, name: str) -> dict[str, str]:
    pod = api.store.get("pods", name, "default")
    assert pod is not None
    return dict(pod["metadata"].get("labels") or {})


@pytest.mark.parametrize("label", [True, False])
def test_bound_pod_carries_the_vgpu_node_label_only_when_asked(kube_api: KubeAPIServer, label: bool) -> None:
    kube_api.store.put(gpu_node("n1"))
    with running(kube_api, vgpu_node_label=label) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p1", mem=1000))
        assert filter_pod(ext, pod, ["n1"])["NodeNames"] == ["n1"]
        assert bind_pod(ext, pod, "n1") == ""
    bound = kube_api.store.get("pods", "p1", "default")
    assert bound is not None and bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["annotations"][ann.POD_VGPU_NODE] == "n1"
    assert (_labels(kube_api, "p1").get(ann.POD_VGPU_NODE) == "n1") is label


def test_the_flag_reaches_the_options() -> None:
    assert options(build_parser().parse_args(["--vgpu-node-label"])).vgpu_node_label is True
    assert options(build_parser().parse_args([])).vgpu_node_label is False
