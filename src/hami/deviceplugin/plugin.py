"""One device plugin instance: devices + health, the gRPC server, kubelet registration, the register loop.

An instance lives from one (re)start to the next; a kubelet restart or SIGHUP builds a new one from fresh
NVML facts, which is also the only way an unhealthy GPU comes back (§C.6: no recovery path).

Section signs (§) refer to docs/design/node-agent.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hami.core import klog
from hami.core.devices import DeviceInfo
from hami.deviceplugin.allocator import Allocator, PodCache
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.container_setup import GpuRef, HostLayout, PreferredRequest, RuntimeOptions
from hami.deviceplugin.health import HealthState
from hami.deviceplugin.inventory import (
    GpuFacts,
    KubeletDevice,
    Skipped,
    build_register_devices,
    kubelet_devices,
)
from hami.deviceplugin.kubeops import NodeOps
from hami.deviceplugin.metrics import PluginMetrics
from hami.deviceplugin.registrar import Registrar
from hami.deviceplugin.server import PluginServer, register_with_kubelet

log = klog.get_logger(__name__)

DEFAULT_MIG_APPLY_LOCK = Path("/tmp/hami/hami-mig-apply.lock")


@dataclass(frozen=True)
class Settings:
    """Process-level settings that do not come from HAMi's device config."""

    node: str
    socket_dir: Path = Path("/var/lib/kubelet/device-plugins")
    kubelet_socket: Path | None = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
    layout: HostLayout = field(default_factory=HostLayout)
    plugin_version: str = "0.1.0"
    runtime: RuntimeOptions = field(default_factory=RuntimeOptions)
    register_interval: float = 30.0
    register_retry: float = 5.0
    mig_apply_lock: Path = DEFAULT_MIG_APPLY_LOCK


class DevicePlugin:
    def __init__(
        self,
        settings: Settings,
        cfg: PluginConfig,
        facts: Sequence[GpuFacts],
        *,
        ops: NodeOps,
        pods: PodCache,
        metrics: PluginMetrics,
    ) -> None:
        self.settings = settings
        self.cfg = cfg
        self._metrics = metrics
        self._facts = list(facts)
        self.health = HealthState(f.uuid for f in self._facts)
        devices, skipped = self._build()
        for s in skipped:
            log.error("skipping device %s: %s", s.uuid, s.reason)
        minors = {f.uuid: f.minor for f in self._facts}
        self._gpus = {d.id: GpuRef(d.index, minors[d.id]) for d in devices}
        self.allocator = Allocator(
            settings.node,
            cfg,
            ops=ops,
            pods=pods,
            metrics=metrics,
            known_ids=self.known_ids,
            gpus=lambda: self._gpus,
            layout=settings.layout,
            plugin_version=settings.plugin_version,
            opts=settings.runtime,
        )
        self.server = PluginServer(self, cfg.resource_name, settings.socket_dir / cfg.socket_name)
        self.registrar = Registrar(
            settings.node,
            ops,
            devices=self.register_devices,
            metrics=metrics,
            paused=self.mig_apply_in_progress,
            interval=settings.register_interval,
            retry=settings.register_retry,
        )
        self._known = frozenset(d.id for d in kubelet_devices(devices, cfg))

    # --- state -------------------------------------------------------------------------------
    def _build(self) -> tuple[list[DeviceInfo], list[Skipped]]:
        _, health = self.health.snapshot()
        return build_register_devices(self._facts, self.cfg, health)

    def register_devices(self) -> list[DeviceInfo]:
        devices, _ = self._build()
        self._metrics.set_devices(devices)
        return devices

    def known_ids(self) -> frozenset[str]:
        return self._known

    def mig_apply_in_progress(self) -> bool:
        return self.settings.mig_apply_lock.exists()

    def mark_unhealthy(self, uuid: str) -> None:
        if self.health.mark_unhealthy(uuid):
            self._metrics.set_devices(self._build()[0])
            self.registrar.trigger()

    # --- Backend (server.py) -------------------------------------------------------------------
    def kubelet_devices(self) -> tuple[int, list[KubeletDevice]]:
        gen, health = self.health.snapshot()
        devices, _ = build_register_devices(self._facts, self.cfg, health)
        return gen, kubelet_devices(devices, self.cfg)

    def wait_health_change(self, seen: int, timeout: float) -> int | None:
        return self.health.wait_change(seen, timeout)

    def allocate(self, requests: Sequence[Sequence[str]]) -> list[pb.ContainerAllocateResponse]:
        return self.allocator.allocate(requests)

    def preferred(self, requests: Sequence[PreferredRequest]) -> list[list[str] | None]:
        return self.allocator.preferred(requests)

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Serve, register with the kubelet, write the annotation once, then loop
        (docs/guides/device-plugin-debugging.md §1.2 order)."""
        self._metrics.set_config(self.cfg)
        resource = self.cfg.resource_name
        self._metrics.set_kubelet_registered(resource, False)
        self.server.start()
        if self.settings.kubelet_socket is not None:
            try:
                register_with_kubelet(
                    self.settings.kubelet_socket,
                    self.cfg.socket_name,
                    resource,
                    self.cfg.enable_get_preferred_allocation,
                )
            except Exception:
                self.server.stop()
                raise
            self._metrics.set_kubelet_registered(resource, True)
        if not self.mig_apply_in_progress():
            self.registrar.register_once()
        self.registrar.start()

    def stop(self) -> None:
        self.registrar.stop()
        self.health.close()
        self.server.stop()
        self._metrics.set_kubelet_registered(self.cfg.resource_name, False)
