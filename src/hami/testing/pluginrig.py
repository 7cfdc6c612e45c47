"""The device plugin in this process on FakeNvml, against the API emulator over real HTTP, registered
with a ``FakeKubelet``: what the device-plugin tests and the Allocate benchmark drive."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from hami.testing.kubelet import FakeKubelet
from hami.testing.wait import wait_until

NODE = "gpu-node-1"
U0 = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"
U1 = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
NVML_SPEC: dict[str, Any] = {
    "devices": [
        {"uuid": U0, "name": "Tesla V100-PCIE-32GB", "memory_mib": 32768, "numa": 0},
        {"uuid": U1, "name": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "numa": 1},
    ]
}


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
    node: str = NODE
    extra: list[Any] = field(default_factory=list)

    @property
    def plugin(self) -> DevicePlugin:
        plugin = self.manager.plugin
        assert plugin is not None
        return plugin

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, {"node": self.node, **labels})
        return 0.0 if value is None else value

    def node_annotations(self) -> dict[str, str]:
        node = client.CoreV1Api(self.kube_client).read_node(self.node)
        return dict(node.metadata.annotations or {})

    def stop(self) -> None:
        self.manager.stop()
        self.kubelet.stop()
        self.pods.stop()
        self.nvml.close()


def start_rig(
    kube_api: KubeAPIServer,
    kube_client: Any,
    directory: Path,
    cfg: PluginConfig | None = None,
    spec: dict[str, Any] | None = None,
    *,
    node: str = NODE,
    fast: bool = True,
    checks: frozenset[str] = frozenset(),
    topology: bool = False,
    settings: dict[str, Any] | None = None,
) -> Rig:
    """Creates ``node``, starts kubelet, informer and plugin, and waits until the plugin serves.

    ``fast``: register, retry and health intervals of a fraction of a second, so that tests see
    changes quickly; False keeps the daemon's own (a benchmark's steady state). ``checks``: the
    opt-in health checks (``--health-checks``); ``topology``: ``ENABLE_TOPOLOGY_SCORE``; ``settings``:
    other ``Settings`` fields (``runtime``, ``cdi_spec_dir``...).
    """
    core = client.CoreV1Api(kube_client)
    core.create_node({"metadata": {"name": node}})
    nvml = FakeNvml(spec or NVML_SPEC)
    kubelet = FakeKubelet(directory)
    kubelet.start()
    registry = CollectorRegistry()
    metrics = PluginMetrics(registry, node)
    pods = Informer(
        kube_client, ("", "v1", "pods"), field_selector=f"spec.nodeName={node}", registry=registry
    )
    pods.start()
    assert pods.wait_for_sync(30)
    quick: dict[str, Any] = (
        {
            "register_interval": 0.2,
            "register_retry": 0.1,
            "grpc_probe_s": 0.05,
            "grpc_backoff_s": 0.01,
            "mig_reconcile_s": 0.1,
            "mig_lock_wait_s": 0.3,
            "mig_grace_s": 0.5,
        }
        if fast
        else {}
    )
    plugin_settings = Settings(
        node=node,
        socket_dir=directory,
        kubelet_socket=kubelet.socket,
        layout=HostLayout(str(directory / "hook"), str(directory / "vgpulock")),
        mig_apply_lock=directory / "hami-mig-apply.lock",
        topology_score=topology,
        **{**quick, **(settings or {})},
    )
    loops: dict[str, Any] = (
        {"retry_s": 0.2, "health_wait_ms": 50, "health_poll_s": 0.05, "watch_interval": 0.05} if fast else {}
    )
    manager = Manager(
        plugin_settings,
        cfg or PluginConfig(device_split_count=4, operating_mode="hami-core"),
        nvml=nvml,
        ops=NodeOps(kube_client),
        pods=pods,
        metrics=metrics,
        policy=XidPolicy(),
        checks=checks,
        **loops,
    )
    manager.start()
    wait_until(manager.started.is_set, 30, "plugin start")
    return Rig(kube_api, kube_client, nvml, kubelet, manager, metrics, registry, pods, directory, node)
