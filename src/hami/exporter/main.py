"""``hami-monitor``: the vGPU monitor daemon (§B.1).

Wiring only: the container lister and feedback loop, the pod informer (this node's pods), NVML
(opened once), the collector, and ``/metrics`` through ``hami.core.serve``.

Section signs (§) refer to docs/design/node-agent-monitor.md.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from hami.core import klog, tracing
from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.kube.client import KubeConfigError, new_api_client
from hami.core.kube.informer import Informer
from hami.core.lifecycle import stop_within, wait_for_stop, wait_unless_stopped
from hami.core.nvml import Nvml, NvmlError, open_nvml
from hami.core.objects import uid_of
from hami.core.profiling import start_tracing
from hami.core.serve import Server, WebConfigError, build_info, serve_metrics
from hami.exporter.collector import MonitorCollector, Tally
from hami.exporter.config import Config, ConfigError, load_config
from hami.exporter.discovery import ContainerLister
from hami.exporter.driver import DriverReader
from hami.exporter.feedback import MIG_APPLY_LOCK, FeedbackLoop
from hami.exporter.host import HostReader

log = klog.get_logger("hami.exporter")
PodSource = Callable[[], Sequence[Mapping[str, Any]]]


def _raise_fd_limit() -> None:
    """Each open region file holds a descriptor; a node can run a thousand containers."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Monitor:
    """One running monitor; ``pods``/``pod_uids`` and ``nvml`` are injectable (simnode, tests)."""

    def __init__(
        self,
        cfg: Config,
        nvml: Nvml | None,
        pods: PodSource,
        pod_uids: Callable[[], set[str] | None],
        *,
        ready: Callable[[], bool] = lambda: True,
        registry: CollectorRegistry | None = None,
        nvml_errors: Tally | None = None,
        mig_lock: str = MIG_APPLY_LOCK,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.lister = ContainerLister(cfg.hook_path, cfg.resync_s)
        self.skips = Tally()
        self.nvml_errors = nvml_errors or Tally()
        self.host = None if nvml is None else HostReader(nvml, self.nvml_errors.add)
        self.driver = DriverReader(nvml, cfg.cgroup_root, self.nvml_errors.add)
        self.collector = MonitorCollector(
            cfg.node_name,
            self.lister,
            pods,
            decode_pod_devices,
            self.host.read if self.host is not None else tuple,
            skips=self.skips,
            nvml_errors=self.nvml_errors,
            legacy=cfg.legacy_metrics,
            labels_allowlist=cfg.pod_labels_allowlist,
            registry=self.registry,
            proc_root=cfg.proc_root,
            driver=self.driver,
        )
        # not registered: /metrics renders it itself (serve's ``exposition``), beside the registry
        build_info("monitor", self.registry)
        tracing.start("hami-monitor", self.registry, cfg.enable_tracing)
        self.feedback = FeedbackLoop(self.lister, pod_uids, mig_lock=mig_lock)
        self._cfg = cfg
        self._ready = ready
        self.server: Server | None = None

    def start(self) -> None:
        os.makedirs(os.path.join(self._cfg.hook_path, "containers"), exist_ok=True)
        self.feedback.prepare()
        self.feedback.tick()  # first scan before the first scrape
        self.feedback.start()
        if self.host is not None:
            self.host.start_xid_watch()
        self.server = serve_metrics(
            self._cfg.bind,
            self.registry,
            ready=self._ready,
            web_config_file=self._cfg.web_config_file,
            profiling=self._cfg.profiling,
            name="hami-monitor",
            exposition=self.collector,
            max_connections=self._cfg.max_connections,
        )
        log.info("Serving metrics on %s", self.server.url)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        self.feedback.stop()
        if self.host is not None:
            self.host.stop()
        self.lister.close()
        self.driver.close()
        if self._cfg.enable_tracing:
            tracing.shutdown()


def _open_nvml(errors: Tally) -> Nvml | None:
    try:
        return open_nvml()
    except NvmlError as err:
        # a node without a driver still serves region metrics; host series are absent
        log.error("failed to initialize NVML: %s", err)
        errors.add([err.call])
        return None
    except ValueError as err:  # HAMI_NVML=fake without a usable spec
        log.error("failed to initialize NVML: %s", err)
        return None


def run(cfg: Config, stop: threading.Event, registry: CollectorRegistry | None = None) -> int:
    _raise_fd_limit()
    # the API client's and informer's metrics go on the registry /metrics serves
    registry = registry or CollectorRegistry()
    try:
        api = new_api_client(cfg.kube, registry)
    except KubeConfigError as err:
        log.error("hami-monitor: %s", err)
        return 1
    informer = Informer(
        api, field_selector=f"spec.nodeName={cfg.node_name}", resync=cfg.resync_s, registry=registry
    )
    informer.start()
    nvml_errors = Tally()
    nvml = _open_nvml(nvml_errors)

    def uids() -> set[str] | None:
        if not informer.has_synced():
            return None
        return {uid_of(p) for p in informer.list()}

    monitor = Monitor(
        cfg, nvml, informer.list, uids, ready=informer.has_synced, registry=registry, nvml_errors=nvml_errors
    )

    def shutdown() -> None:
        monitor.stop()
        informer.stop()
        if nvml is not None:
            nvml.close()

    try:
        monitor.start()
    except (OSError, WebConfigError) as err:
        # fail fast and say what to change: the kubelet restarts the pod, and the log says why
        log.error("hami-monitor: cannot start: %s (check --metrics-bind-address, --web.config.file "
                  "and HOOK_PATH)", err)
        stop_within(shutdown, "hami-monitor")
        return 1
    if wait_unless_stopped(informer.wait_for_sync, stop, 60):
        log.info("Pod informer started successfully")
    elif not stop.is_set():
        log.warning("failed to sync pod informer cache; serving region metrics without pods")
    wait_for_stop(stop)
    stop_within(shutdown, "hami-monitor")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cfg = load_config(sys.argv[1:] if argv is None else argv, os.environ)
    except ConfigError as err:
        print(f"hami-monitor: {err}", file=sys.stderr)
        return 1
    klog.setup(cfg.verbosity)
    if cfg.profiling_heap_from_start:
        start_tracing()  # the heap profile shows what was allocated before the request
    for warning in cfg.warnings:
        log.warning("config: %s", warning)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return run(cfg, stop)


if __name__ == "__main__":
    sys.exit(main())
