"""Plugin lifecycle (§C.1 "Start"): start, restart on kubelet restart or SIGHUP, retry in 30 s.

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from hami.core import annotations as ann
from hami.core import klog
from hami.core.codec.errors import CodecError
from hami.core.codec.mig import decode_mig_allocations
from hami.core.codec.node_devices import encode_pair_scores
from hami.core.devices import MODE_MIG
from hami.core.kube.events import WARNING, EventRecorder, ObjectRef
from hami.core.nvml import Nvml, NvmlError
from hami.core.objects import annotations_of, object_key
from hami.deviceplugin.cdi import CDI_STRATEGIES, SpecGpu, build_spec
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.health import XidPolicy
from hami.deviceplugin.inventory import GpuFacts, build_register_devices
from hami.deviceplugin.kubeops import NodeOps
from hami.deviceplugin.metrics import PluginMetrics
from hami.deviceplugin.migpartition import MigPartitioner, MigReconciler
from hami.deviceplugin.migplan import held
from hami.deviceplugin.nvml_source import HealthChecker, read_gpu_facts, read_links, with_mig_profiles
from hami.deviceplugin.pendingpods import PodCache
from hami.deviceplugin.plugin import DevicePlugin, Settings
from hami.deviceplugin.server import SocketWatcher
from hami.deviceplugin.specdir import SpecWriteError, find_driver_files, write_spec
from hami.deviceplugin.topology import PairScores, pair_scores

log = klog.get_logger(__name__)
ASYMMETRIC_EVENT_EVERY_S = 3600.0  # HAMi dedups AsymmetricGPUP2PLink to one per hour


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
        checks: frozenset[str] = frozenset(),
        events: EventRecorder | None = None,
        retry_s: float = 30.0,
        health_wait_ms: int = 500,
        health_poll_s: float = 5.0,
        watch_interval: float = 0.5,
        on_fatal: Callable[[str], None] = lambda message: log.error("plugin fatal: %s", message),
    ) -> None:
        self.settings = settings
        self.cfg = cfg
        self._nvml = nvml
        self._ops = ops
        self._pods = pods
        self._metrics = metrics
        self._policy = policy
        self._checks = checks
        # Node events of health changes; a recorder of our own unless the caller shares one.
        self._own_events = events is None
        self._events = events or EventRecorder(ops.api_client, "hami-device-plugin", settings.node)
        self.retry_s = retry_s
        self._health_wait_ms = health_wait_ms
        self._health_poll_s = health_poll_s
        self._asymmetric_warned: dict[tuple[str, str], float] = {}
        self._on_fatal = on_fatal  # the process gives up (main exits 255)
        self.plugin: DevicePlugin | None = None
        self._checker: HealthChecker | None = None
        self._reconciler: MigReconciler | None = None
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
        if self._own_events:
            self._events.stop()

    def _supervise(self) -> None:
        while not self._stop.is_set():
            ok = self._cycle()
            if not ok:
                log.error("Failed to start one or more plugins. Retrying in %ds...", self.retry_s)
            self._kick.wait(None if ok else self.retry_s)
            self._kick.clear()

    def _stop_plugin(self) -> None:
        reconciler, self._reconciler = self._reconciler, None
        if reconciler is not None:
            reconciler.stop()
        checker, self._checker = self._checker, None
        plugin, self.plugin = self.plugin, None
        if checker is not None:
            checker.stop()
        if plugin is not None:
            plugin.stop()

    def _scores(self, uuids: list[str]) -> PairScores:
        """The pair scores of the registered GPUs; an asymmetric pair is a Node warning once an hour."""
        scores = pair_scores(read_links(self._nvml, uuids))
        log.v(4).info("GPU pair scores: %s", encode_pair_scores(scores.scores))
        now = time.monotonic()
        for a, b in scores.asymmetric:
            log.warning("P2PLinks mismatch between %s and %s: their pair scores 0", a, b)
            last = self._asymmetric_warned.get((a, b))
            if last is None or now - last >= ASYMMETRIC_EVENT_EVERY_S:
                self._asymmetric_warned[(a, b)] = now
                self._events.event(
                    ObjectRef(kind="Node", name=self.settings.node, uid=self.settings.node),
                    WARNING,
                    "AsymmetricGPUP2PLink",
                    f"NVML reports different links from {a} to {b} than back; the pair scores 0 "
                    "for topology-aware scheduling",
                )
        return scores

    def _write_cdi_spec(self, facts: list[GpuFacts]) -> bool:
        """The spec the cdi-* strategies' names resolve through; no plugin without it (pods would
        fail in the runtime instead of waiting for a node that can run them)."""
        s = self.settings
        gpus = [SpecGpu(f.uuid, f.index, f.minor) for f in facts]
        spec = build_spec(gpus, s.runtime.dev_root, s.driver_root, find_driver_files(s.driver_root))
        try:
            path = write_spec(s.cdi_spec_dir, spec)
        except SpecWriteError as exc:
            log.error("%s; the container runtime could not resolve the CDI devices Allocate names", exc)
            self._metrics.cdi_spec_errors.labels(s.node, exc.reason).inc()
            return False
        log.info("Wrote the CDI spec %s for %d device(s)", path, len(gpus))
        return True

    def _mig(self, facts: list[GpuFacts], uuids: list[str]) -> MigPartitioner | None:
        """In mig mode: the partitioner Allocate creates instances with, and its reconciler, whose
        first pass (now) destroys what pods that went while the plugin was down left behind."""
        if self.cfg.operating_mode != MODE_MIG:
            return None
        allowed = {f.uuid: self.cfg.allowed_mig_profiles(f.name) for f in facts if f.uuid in uuids}
        s = self.settings
        partitioner = MigPartitioner(
            self._nvml, s.mig_apply_lock, allowed, lock_wait_s=s.mig_lock_wait_s, grace_s=s.mig_grace_s
        )
        self._reconciler = MigReconciler(partitioner, uuids, self._held_mig, s.mig_reconcile_s)
        self._reconciler.start()
        return partitioner

    def _held_mig(self) -> set[tuple[str, int]] | None:
        """The MIG instances the live pods of this node hold; None until the pod cache is complete."""
        if not self._pods.has_synced():
            return None
        allocations = []
        for pod in self._pods.list():
            text = annotations_of(pod).get(ann.POD_MIG_ALLOCATIONS)
            if not text or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            try:
                allocations.append(decode_mig_allocations(text))
            except CodecError as exc:
                log.warning("pod %s: undecodable %s: %s", object_key(pod), ann.POD_MIG_ALLOCATIONS, exc)
                return None  # cannot tell what it holds: destroy nothing this pass
        return held(allocations)

    def _cycle(self) -> bool:
        self._stop_plugin()
        if self._stop.is_set():
            return True
        try:
            facts = read_gpu_facts(self._nvml)
        except NvmlError as exc:
            log.error("nvml Init err: %s", exc)
            return False
        if self.cfg.operating_mode == MODE_MIG:
            facts = with_mig_profiles(self._nvml, facts, self.cfg)
        uuids = [d.id for d in build_register_devices(facts, self.cfg, {})[0]]
        if not uuids:
            log.info("No devices found. Waiting indefinitely.")
            return True
        if CDI_STRATEGIES & set(self.settings.runtime.list_strategies) and not self._write_cdi_spec(
            [f for f in facts if f.uuid in uuids]
        ):
            return False
        plugin = DevicePlugin(
            self.settings,
            self.cfg,
            facts,
            ops=self._ops,
            pods=self._pods,
            metrics=self._metrics,
            events=self._events,
            scores=self._scores(uuids) if self.settings.topology_score else None,
            on_fatal=self._on_fatal,
            mig=self._mig(facts, uuids),
        )
        plugin.register_devices()  # the device metrics before the first kubelet call
        try:
            plugin.start()
        except Exception as exc:
            log.error("Failed to start plugin for '%s': %s", self.cfg.resource_name, exc)
            return False
        checker = HealthChecker(
            self._nvml,
            uuids,
            self._policy,
            checks=self._checks,
            on_condition=plugin.set_condition,
            on_event=self._metrics.health_event,
            paused=plugin.mig_apply_in_progress,
            wait_ms=self._health_wait_ms,
            poll_s=self._health_poll_s,
        )
        checker.start()
        self.plugin, self._checker = plugin, checker
        self.started.set()
        return True
