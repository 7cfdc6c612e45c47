"""One device plugin instance: devices + health, the gRPC server, kubelet registration, the register loop.

An instance lives from one (re)start to the next; a kubelet restart or SIGHUP builds a new one from fresh
NVML facts, which is also the only way back from HAMi's unhealthy reasons (§C.6: no recovery path);
the opt-in reasons of health.py come back when NVML says so.

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hami.core import annotations as ann
from hami.core import klog
from hami.core.codec.node_devices import encode_pair_scores
from hami.core.devices import DeviceInfo
from hami.core.hamicore import HostLayout
from hami.core.kube.events import NORMAL, WARNING, EventRecorder, ObjectRef
from hami.deviceplugin.allocator import Allocator
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.container_setup import GpuRef, PreferredRequest, RuntimeOptions
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
from hami.deviceplugin.migpartition import MigPartitioner
from hami.deviceplugin.pendingpods import PodCache
from hami.deviceplugin.registrar import Registrar
from hami.deviceplugin.server import PluginServer, register_with_kubelet
from hami.deviceplugin.topology import PairScores

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
    topology_score: bool = False  # ENABLE_TOPOLOGY_SCORE: write hami.io/node-nvidia-score
    grpc_probe_s: float = 5.0  # how often the gRPC server's liveness is checked
    grpc_backoff_s: float = 0.5  # first delay before serving again after a crash
    cdi_spec_dir: Path = Path("/var/run/cdi")  # where runtimes look for CDI specs
    driver_root: str = "/"  # --nvidia-driver-root: the driver files the CDI spec mounts
    mig_reconcile_s: float = 5.0  # how often MIG instances of pods that are gone are destroyed
    mig_lock_wait_s: float = 10.0  # how long Allocate waits for another holder of the MIG apply lock
    mig_grace_s: float = 60.0  # a new MIG instance is not judged before its pod's annotation is seen


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
        events: EventRecorder | None = None,
        scores: PairScores | None = None,
        on_fatal: Callable[[str], None] = lambda message: log.error("plugin fatal: %s", message),
        mig: MigPartitioner | None = None,
    ) -> None:
        self.settings = settings
        self.cfg = cfg
        self._metrics = metrics
        self._events = events
        self._facts = list(facts)
        self.health = HealthState(f.uuid for f in self._facts)
        devices, skipped = self._build()
        for s in skipped:
            log.warning("skipping device %s: %s", s.uuid, s.reason)
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
            mig=mig,
        )
        self.server = PluginServer(
            self,
            cfg.resource_name,
            settings.socket_dir / cfg.socket_name,
            on_restart=self._register_with_kubelet,
            on_crash=lambda: metrics.grpc_restarts.labels(settings.node, cfg.resource_name).inc(),
            on_give_up=on_fatal,
            probe_s=settings.grpc_probe_s,
            backoff_s=settings.grpc_backoff_s,
        )
        self.registrar = Registrar(
            settings.node,
            ops,
            devices=self.register_devices,
            extra={ann.NODE_PAIR_SCORE: encode_pair_scores(scores.scores)} if scores is not None else None,
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
        log.v(4).info(
            "device metrics updated: %d device(s), %d healthy", len(devices), sum(d.health for d in devices)
        )
        return devices

    def known_ids(self) -> frozenset[str]:
        return self._known

    def mig_apply_in_progress(self) -> bool:
        return self.settings.mig_apply_lock.exists()

    def set_condition(self, uuid: str, reason: str, detail: str | None) -> None:
        """A health reason of one GPU came (``detail``) or went (None): kubelet, annotation, Node event."""
        if self.health.set_reason(uuid, reason, detail):
            self._metrics.set_devices(self._build()[0])
            self.registrar.trigger()
        if self._events is None:
            return
        node = ObjectRef(kind="Node", name=self.settings.node, uid=self.settings.node)  # as the kubelet
        if detail is not None:
            message = f"Device {uuid} is unhealthy ({reason}): {detail}"
            self._events.event(node, WARNING, "GPUUnhealthy", message)
        else:
            healthy = not self.health.reasons(uuid)
            tail = "; the device is healthy again" if healthy else ""
            self._events.event(node, NORMAL, "GPURecovered", f"Device {uuid} recovered from {reason}{tail}")

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
        try:
            self._register_with_kubelet()
        except Exception:
            self.server.stop()
            raise
        if not self.mig_apply_in_progress():
            self.registrar.register_once()
        self.registrar.start()

    def _register_with_kubelet(self) -> None:
        """At start, and after the gRPC server was served again (the kubelet lost its stream)."""
        if self.settings.kubelet_socket is None:
            return
        register_with_kubelet(
            self.settings.kubelet_socket,
            self.cfg.socket_name,
            self.cfg.resource_name,
            self.cfg.enable_get_preferred_allocation,
        )
        self._metrics.set_kubelet_registered(self.cfg.resource_name, True)

    def stop(self) -> None:
        self.registrar.stop()
        self.health.close()
        self.server.stop()
        self._metrics.set_kubelet_registered(self.cfg.resource_name, False)
