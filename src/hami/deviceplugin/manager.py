"""Plugin lifecycle (§C.1 "Start"): start, restart on kubelet restart or SIGHUP, retry in 30 s.

Section signs (§) refer to docs/design/node-agent.md.
"""

from __future__ import annotations

import threading

from hami.core import klog
from hami.core.nvml import Nvml, NvmlError
from hami.deviceplugin.allocator import PodCache
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.health import XidPolicy
from hami.deviceplugin.kubeops import NodeOps
from hami.deviceplugin.metrics import PluginMetrics
from hami.deviceplugin.nvml_source import HealthChecker, read_gpu_facts
from hami.deviceplugin.plugin import DevicePlugin, Settings
from hami.deviceplugin.server import SocketWatcher

log = klog.get_logger(__name__)


class Manager:
    def __init__(
        self,
        settings: Settings,
        cfg: PluginConfig,
        *,
        nvml: Nvml,
        ops: NodeOps,
        pods: PodCache,
        metrics: PluginMetrics,
        policy: XidPolicy,
        retry_s: float = 30.0,
        health_wait_ms: int = 500,
        watch_interval: float = 0.5,
    ) -> None:
        self.settings = settings
        self.cfg = cfg
        self._nvml = nvml
        self._ops = ops
        self._pods = pods
        self._metrics = metrics
        self._policy = policy
        self.retry_s = retry_s
        self._health_wait_ms = health_wait_ms
        self.plugin: DevicePlugin | None = None
        self._checker: HealthChecker | None = None
        self._kick = threading.Event()
        self._stop = threading.Event()
        self.started = threading.Event()  # set after each successful (re)start, for observers
        self._thread = threading.Thread(target=self._supervise, name="plugin-manager", daemon=True)
        self._watcher = (
            SocketWatcher(settings.kubelet_socket, self.restart, watch_interval)
            if settings.kubelet_socket is not None
            else None
        )

    def start(self) -> None:
        if self._watcher is not None:
            self._watcher.start()
        self._thread.start()

    def restart(self) -> None:
        """Rebuild the plugin from fresh NVML facts (kubelet restart, SIGHUP)."""
        self.started.clear()
        self._kick.set()

    def stop(self) -> None:
        self._stop.set()
        self._kick.set()
        if self._watcher is not None:
            self._watcher.stop()
        if self._thread.is_alive():
            self._thread.join()
        self._stop_plugin()

    def _supervise(self) -> None:
        while not self._stop.is_set():
            ok = self._cycle()
            if not ok:
                log.error("Failed to start one or more plugins. Retrying in %ds...", self.retry_s)
            self._kick.wait(None if ok else self.retry_s)
            self._kick.clear()

    def _stop_plugin(self) -> None:
        checker, self._checker = self._checker, None
        plugin, self.plugin = self.plugin, None
        if checker is not None:
            checker.stop()
        if plugin is not None:
            plugin.stop()

    def _cycle(self) -> bool:
        self._stop_plugin()
        if self._stop.is_set():
            return True
        try:
            facts = read_gpu_facts(self._nvml)
        except NvmlError as exc:
            log.error("nvml Init err: %s", exc)
            return False
        plugin = DevicePlugin(
            self.settings, self.cfg, facts, ops=self._ops, pods=self._pods, metrics=self._metrics
        )
        uuids = [d.id for d in plugin.register_devices()]
        if not uuids:
            log.info("No devices found. Waiting indefinitely.")
            return True
        try:
            plugin.start()
        except Exception as exc:
            log.error("Failed to start plugin for '%s': %s", self.cfg.resource_name, exc)
            return False
        checker = HealthChecker(
            self._nvml,
            uuids,
            self._policy,
            on_unhealthy=plugin.mark_unhealthy,
            on_event=self._metrics.health_event,
            paused=plugin.mig_apply_in_progress,
            wait_ms=self._health_wait_ms,
        )
        checker.start()
        self.plugin, self._checker = plugin, checker
        self.started.set()
        return True
