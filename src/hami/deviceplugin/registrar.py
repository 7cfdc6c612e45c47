"""``hami.io/node-nvidia-register`` (and ``hami.io/node-nvidia-score`` with ``ENABLE_TOPOLOGY_SCORE``):
written every 30 s when the devices changed, retried in 5 s (§C.4). The scores are computed once
per plugin start, as the topology does not change while the plugin runs.

Unlike HAMi, the "last written" cache is updated only after the patch succeeded, so a failed write is
really retried 5 s later instead of waiting for the next device change.

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence

from hami.core import annotations as ann
from hami.core import klog, tracing
from hami.core.codec.node_devices import encode_node_devices
from hami.core.devices import DeviceInfo
from hami.deviceplugin.kubeops import NodeOps
from hami.deviceplugin.metrics import PluginMetrics

log = klog.get_logger(__name__)


class Registrar:
    def __init__(
        self,
        node: str,
        ops: NodeOps,
        *,
        devices: Callable[[], Sequence[DeviceInfo]],
        extra: Mapping[str, str] | None = None,
        metrics: PluginMetrics,
        paused: Callable[[], bool],
        interval: float = 30.0,
        retry: float = 5.0,
    ) -> None:
        self.node = node
        self._ops = ops
        self._devices = devices
        self._extra = dict(extra or {})  # annotations written beside the register one (pair scores)
        self._metrics = metrics
        self._paused = paused
        self.interval = interval
        self.retry = retry
        self._last: str | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def register_once(self) -> bool:
        """One pass; True when the annotation is current afterwards (patched or unchanged)."""
        devices = list(self._devices())
        encoded = encode_node_devices(devices)
        annos = {ann.NODE_REGISTER: encoded, **self._extra}
        for key, value in annos.items():
            log.v(4).info("node %s annotation %s=%s", self.node, key, value)
        if encoded == self._last:
            log.v(3).info("Device info unchanged, skipping annotation update")
            log.v(3).info("No device changes detected. Next check in %ds...", self.interval)
            self._metrics.register.labels(self.node, "unchanged").inc()
            self._metrics.register_last_success.labels(self.node).set(time.time())
            return True
        log.info("start working on the devices")
        for dev in devices:
            log.info(
                "nvml registered device id=%d, memory=%d, type=%s, numa=%d",
                dev.index,
                dev.devmem,
                dev.type,
                dev.numa,
            )
        try:
            self._ops.get_node(self.node)
        except Exception as exc:
            log.error("get node error %s", exc)
            return self._failed(exc)
        log.info("patch node with the following annos %s", annos)
        log.info("Updating node annotations with %d device(s)", len(devices))
        try:
            self._ops.patch_node_annotations(self.node, dict(annos))
        except Exception as exc:
            log.error("patch node error %s", exc)
            return self._failed(exc)
        self._last = encoded
        self._metrics.register.labels(self.node, "success").inc()
        self._metrics.register_last_success.labels(self.node).set(time.time())
        log.info("Successfully registered annotation. Next check in %ds seconds...", self.interval)
        return True

    def _failed(self, exc: Exception) -> bool:
        self._metrics.register.labels(self.node, "failure").inc()
        log.error("Failed to register annotation: %s. Retrying in %ds seconds...", exc, self.retry)
        return False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="watch-and-register", daemon=True)
        self._thread.start()

    def trigger(self) -> None:
        """Re-check now (a health change should not wait up to 30 s to reach the scheduler)."""
        self._wake.set()

    def _run(self) -> None:
        log.info("Starting WatchAndRegister")
        paused = False
        while not self._stop.is_set():
            if self._paused():
                if not paused:
                    log.info("MIG apply lock file detected, pausing WatchAndRegister")
                    paused = True
                self._sleep(self.interval)
                continue
            if paused:
                log.info("MIG apply lock file removed, resuming WatchAndRegister")
                paused = False
            span = tracing.own_span("hami.deviceplugin.register", {"k8s.node.name": self.node})
            try:
                ok = self.register_once()
            except Exception:
                log.error("register pass failed", exc_info=True)
                ok = False
            tracing.end(span, "" if ok else "register failed")
            self._sleep(self.interval if ok else self.retry)

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
