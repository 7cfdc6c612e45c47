"""The chart on the real control plane (session-scoped): applied server-side, its scheduler pod
running as processes (the extender with the Deployment's arguments, kube-scheduler with the chart's
KubeSchedulerConfiguration), on two simulated GPU nodes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hami.testing import builders
from hami.testing.controlplane import ControlPlane
from hami.testing.controlplane.deploy import Hami, install

GPU_NODES = ("cp-gpu-1", "cp-gpu-2")
CARDS, SPLIT = 2, 10  # per node: two cards of 8000 MiB, ten slots each (builders.gpu_node)


def gpu_node(name: str) -> dict[str, object]:
    node = builders.gpu_node(name, gpus=CARDS, count=SPLIT)
    node["metadata"]["labels"] = {"kubernetes.io/hostname": name, "gpu": "on"}
    node.pop("status", None)  # the control plane writes a kubelet's status (Ready, allocatable)
    return node


@pytest.fixture(scope="session")
def hami(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hami]:
    deployed = install(
        control_plane,
        tmp_path_factory.mktemp("hami-chart"),
        nodes=[(gpu_node(n), CARDS * SPLIT) for n in GPU_NODES],
    )
    deployed.start_node_agents(CARDS, SPLIT)
    deployed.start_scheduler()
    yield deployed
    deployed.stop_scheduler()
