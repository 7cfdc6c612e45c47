"""Fixtures: the plugin on FakeNvml and the Kubernetes API emulator, driven by a fake kubelet."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from hami.core.hamicore import HostLayout
from hami.core.kube.informer import Informer
from hami.core.nvml.fake import FakeNvml
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.health import XidPolicy
from hami.deviceplugin.kubeops import NodeOps
from hami.deviceplugin.manager import Manager
from hami.deviceplugin.metrics import PluginMetrics
from hami.deviceplugin.plugin import DevicePlugin, Settings
from hami.testing.kubeapi import KubeAPIServer
from tests.deviceplugin.kubelet import FakeKubelet, wait_for

NODE = "gpu-node-1"
U0 = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"
U1 = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
NVML_SPEC: dict[str, Any] = {
    "devices": [
        {"uuid": U0, "name": "Tesla V100-PCIE-32GB", "memory_mib": 32768, "numa": 0},
        {"uuid": U1, "name": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "numa": 1},
    ]
}


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short directory: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="dp", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class Rig:
    kube_api: KubeAPIServer
    kube_client: Any
    nvml: FakeNvml
    kubelet: FakeKubelet
    manager: Manager
    metrics: PluginMetrics
    registry: CollectorRegistry
    pods: Informer
    dir: Path
    extra: list[Any] = field(default_factory=list)

    @property
    def plugin(self) -> DevicePlugin:
        plugin = self.manager.plugin
        assert plugin is not None
        return plugin

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, {"node": NODE, **labels})
        return 0.0 if value is None else value

    def node_annotations(self) -> dict[str, str]:
        node = client.CoreV1Api(self.kube_client).read_node(NODE)
        return dict(node.metadata.annotations or {})


def start_rig(
    kube_api: KubeAPIServer,
    kube_client: Any,
    directory: Path,
    cfg: PluginConfig | None = None,
    spec: dict[str, Any] | None = None,
    *,
    checks: frozenset[str] = frozenset(),
    topology: bool = False,
) -> Rig:
    core = client.CoreV1Api(kube_client)
    core.create_node({"metadata": {"name": NODE}})
    nvml = FakeNvml(spec or NVML_SPEC)
    kubelet = FakeKubelet(directory)
    kubelet.start()
    registry = CollectorRegistry()
    metrics = PluginMetrics(registry, NODE)
    pods = Informer(
        kube_client, ("", "v1", "pods"), field_selector=f"spec.nodeName={NODE}", registry=registry
    )
    pods.start()
    assert pods.wait_for_sync(30)
    settings = Settings(
        node=NODE,
        socket_dir=directory,
        kubelet_socket=directory / "kubelet.sock",
        layout=HostLayout(str(directory / "hook"), str(directory / "vgpulock")),
        register_interval=0.2,
        register_retry=0.1,
        mig_apply_lock=directory / "hami-mig-apply.lock",
        topology_score=topology,
        grpc_probe_s=0.05,
        grpc_backoff_s=0.01,
    )
    manager = Manager(
        settings,
        cfg or PluginConfig(device_split_count=4, operating_mode="hami-core"),
        nvml=nvml,
        ops=NodeOps(kube_client),
        pods=pods,
        metrics=metrics,
        policy=XidPolicy(),
        checks=checks,
        retry_s=0.2,
        health_wait_ms=50,
        health_poll_s=0.05,
        watch_interval=0.05,
    )
    manager.start()
    wait_for(manager.started.is_set, what="plugin start")
    return Rig(kube_api, kube_client, nvml, kubelet, manager, metrics, registry, pods, directory)


@pytest.fixture
def rig(kube_api: KubeAPIServer, kube_client: Any, short_dir: Path) -> Iterator[Rig]:
    r = start_rig(kube_api, kube_client, short_dir)
    yield r
    r.manager.stop()
    r.kubelet.stop()
    r.pods.stop()
    r.nvml.close()
