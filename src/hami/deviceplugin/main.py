"""``hami-device-plugin``: HAMi's NVIDIA device plugin (§C) with its own metrics on :9396.

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from prometheus_client import CollectorRegistry

import hami
from hami.core import klog, tracing
from hami.core.devices import ENFORCE_HAMI_CORE, ENFORCEMENTS
from hami.core.duration import duration_flag
from hami.core.hamicore import HostLayout
from hami.core.kube.client import KubeConfigError, new_api_client
from hami.core.kube.events import EventRecorder
from hami.core.kube.informer import Informer
from hami.core.kube.options import add_kube_flags, from_args
from hami.core.lifecycle import stop_within, wait_for_stop, wait_unless_stopped
from hami.core.nvml import Nvml, NvmlError, open_nvml
from hami.core.profiling import (
    add_heap_from_start_flag,
    add_profiling_flag,
    check_profiling_flags,
    start_tracing,
)
from hami.core.serve import WebConfigError, add_web_flags, build_info, serve_metrics
from hami.core.tracing import add_tracing_flag
from hami.deviceplugin.cdi import ANNOTATION_PREFIX, ENVVAR, parse_strategies
from hami.deviceplugin.config import ConfigError, PluginConfig, load_config
from hami.deviceplugin.container_setup import RuntimeOptions
from hami.deviceplugin.health import parse_health_checks, parse_xid_policy
from hami.deviceplugin.kubeops import NodeOps
from hami.deviceplugin.manager import Manager
from hami.deviceplugin.metrics import PluginMetrics
from hami.deviceplugin.plugin import DEFAULT_MIG_APPLY_LOCK, Settings

log = klog.get_logger("hami.deviceplugin")

DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins/"


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in {"1", "t", "true", "yes"}:
        return True
    if value in {"0", "f", "false", "no", ""}:
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r}")


def _strategies(text: str) -> tuple[str, ...]:
    try:
        return parse_strategies(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _ids(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hami-device-plugin", description=__doc__)
    a = p.add_argument
    a("--node-name", default=_env("NODE_NAME", ""), help="this node (env NODE_NAME)")
    a("--config-file", default=_env("CONFIG_FILE", ""), help="HAMi device config YAML (env CONFIG_FILE)")
    a(
        "--node-config-file",
        default=_env("NODE_CONFIG_FILE", "/config/config.json"),
        help="per-node JSON (nodeconfig entries; names may be wildcards)",
    )
    a("--mig-strategy", default=_env("MIG_STRATEGY", "none"), choices=["none", "single", "mixed"])
    a("--fail-on-init-error", type=_bool, default=_bool(_env("FAIL_ON_INIT_ERROR", "true")))
    a("--device-id-strategy", default=_env("DEVICE_ID_STRATEGY", "uuid"), choices=["uuid", "index"])
    a(
        "--device-list-strategy",
        type=_strategies,
        default=_env("DEVICE_LIST_STRATEGY", ENVVAR),
        help="how Allocate names the devices, comma-separated: envvar, volume-mounts, cdi-annotations, "
        "cdi-cri (env DEVICE_LIST_STRATEGY; default %(default)s)",
    )
    a(
        "--cdi-annotation-prefix",
        default=_env("CDI_ANNOTATION_PREFIX", ANNOTATION_PREFIX),
        help="prefix of the cdi-annotations annotation (default %(default)s)",
    )
    a(
        "--cdi-spec-dir",
        default=_env("CDI_SPEC_DIR", "/var/run/cdi"),
        help="where the cdi-* strategies write this node's CDI spec (default %(default)s)",
    )
    a(
        "--pass-device-specs",
        type=_bool,
        default=_bool(_env("PASS_DEVICE_SPECS", "false")),
        help="also return /dev/nvidia<minor> device specs",
    )
    a("--nvidia-driver-root", default=_env("NVIDIA_DRIVER_ROOT", "/"))
    a(
        "--dev-root",
        default=os.environ.get("NVIDIA_DEV_ROOT"),
        help="host root of /dev (default: driver root)",
    )
    a("--gdrcopy-enabled", action="store_true", help="NVIDIA_GDRCOPY=enabled in every response")
    a("--gds-enabled", action="store_true", help="NVIDIA_GDS=enabled in every response")
    a("--mofed-enabled", action="store_true", help="NVIDIA_MOFED=enabled in every response")
    a(
        "--imex-channel-ids",
        type=_ids,
        default=(),
        help="comma-separated IMEX channels (NVIDIA_IMEX_CHANNELS)",
    )
    a("--imex-required", action="store_true", help="fail at start when no IMEX channel is configured")
    a("--device-discovery-strategy", default="auto", choices=["auto", "nvml"], help="tegra is not supported")
    a(
        "--device-plugin-path",
        default=_env("DEVICE_PLUGIN_PATH", DEFAULT_PLUGIN_DIR),
        help="directory of the plugin socket (default %(default)s)",
    )
    a(
        "--kubelet-socket",
        default=os.environ.get("KUBELET_SOCKET"),
        help="kubelet registration socket; default <device-plugin-path>/kubelet.sock; '' skips registration",
    )
    a(
        "--device-split-count",
        type=int,
        default=int(_env("DEVICE_SPLIT_COUNT", "2")),
        help="fallback when the device config has no deviceSplitCount",
    )
    a("--device-memory-scaling", type=float, default=float(_env("DEVICE_MEMORY_SCALING", "1.0")))
    a("--device-cores-scaling", type=float, default=float(_env("DEVICE_CORES_SCALING", "1.0")))
    a("--disable-core-limit", type=_bool, default=_bool(_env("DISABLE_CORE_LIMIT", "false")))
    a(
        "--memory-enforcement",
        choices=ENFORCEMENTS,
        default=_env("MEMORY_ENFORCEMENT", ENFORCE_HAMI_CORE),
        help="who enforces vGPU memory limits on this node: hami-core (CUDA_DEVICE_MEMORY_LIMIT_*) or "
        "driver (NVIDIA_GPU_MEMORY_LIMIT for the container toolkit's hook); the device config's "
        "memoryEnforcement overrides it",
    )
    a("--resource-name", default=_env("RESOURCE_NAME", "nvidia.com/gpu"))
    a(
        "--enable-topology-score",
        type=_bool,
        default=_bool(_env("ENABLE_TOPOLOGY_SCORE", "false")),
        help="write GPU pair scores (hami.io/node-nvidia-score) for the topology-aware policy "
        "(env ENABLE_TOPOLOGY_SCORE)",
    )
    a(
        "--health-checks",
        default=_env("HAMI_HEALTH_CHECKS", ""),
        help="health checks beyond HAMi's critical Xids, comma-separated: ecc, retired-pages, "
        "temperature, device-lost, or all (env HAMI_HEALTH_CHECKS; default none)",
    )
    a("--hook-path", default=_env("HOOK_PATH", "/usr/local"), help="HAMi-core install prefix (env HOOK_PATH)")
    a("--vgpu-lock-dir", default="/tmp/vgpulock", help="host directory mounted at /tmp/vgpulock")
    a("--mig-apply-lock", default=str(DEFAULT_MIG_APPLY_LOCK))
    a("--metrics-bind-address", default=":9396")
    add_profiling_flag(p)  # /debug/pprof/ on the metrics listener
    add_heap_from_start_flag(p)
    a(
        "--nvml",
        default="auto",
        choices=["auto", "real", "fake"],
        help="NVML backend; fake needs --fake-nvml-spec (or HAMI_FAKE_NVML_SPEC)",
    )
    a("--fake-nvml-spec", default=None, help="FakeNvml node description (YAML)")
    # Test knobs: seconds or Go durations.
    seconds = duration_flag(bare_seconds=True)
    a("--register-interval", type=seconds, default=timedelta(seconds=30), help=argparse.SUPPRESS)
    a("--register-retry", type=seconds, default=timedelta(seconds=5), help=argparse.SUPPRESS)
    a("--start-retry", type=seconds, default=timedelta(seconds=30), help=argparse.SUPPRESS)
    a("--grpc-probe-interval", type=seconds, default=timedelta(seconds=5), help=argparse.SUPPRESS)
    a("--grpc-restart-backoff", type=seconds, default=timedelta(seconds=0.5), help=argparse.SUPPRESS)
    add_tracing_flag(p)
    add_kube_flags(p)
    add_web_flags(p)
    klog.add_log_flags(p)
    return p


def settings_from(args: argparse.Namespace) -> Settings:
    plugin_dir = Path(args.device_plugin_path)
    kubelet = args.kubelet_socket
    kubelet_socket = plugin_dir / "kubelet.sock" if kubelet is None else (Path(kubelet) if kubelet else None)
    return Settings(
        node=args.node_name,
        socket_dir=plugin_dir,
        kubelet_socket=kubelet_socket,
        layout=HostLayout(args.hook_path.rstrip("/") or "/", args.vgpu_lock_dir),
        plugin_version=hami.__version__,
        runtime=RuntimeOptions(
            id_strategy=args.device_id_strategy,
            pass_device_specs=args.pass_device_specs,
            dev_root=args.dev_root or args.nvidia_driver_root,
            gdrcopy=args.gdrcopy_enabled,
            gds=args.gds_enabled,
            mofed=args.mofed_enabled,
            imex_channel_ids=args.imex_channel_ids,
            list_strategies=args.device_list_strategy,
            cdi_annotation_prefix=args.cdi_annotation_prefix,
        ),
        cdi_spec_dir=Path(args.cdi_spec_dir),
        driver_root=args.nvidia_driver_root,
        register_interval=args.register_interval.total_seconds(),
        register_retry=args.register_retry.total_seconds(),
        mig_apply_lock=Path(args.mig_apply_lock),
        topology_score=args.enable_topology_score,
        grpc_probe_s=args.grpc_probe_interval.total_seconds(),
        grpc_backoff_s=args.grpc_restart_backoff.total_seconds(),
    )


def config_from(args: argparse.Namespace) -> PluginConfig:
    base = PluginConfig(
        device_split_count=args.device_split_count,
        device_memory_scaling=args.device_memory_scaling,
        device_core_scaling=args.device_cores_scaling,
        resource_name=args.resource_name,
        memory_enforcement=args.memory_enforcement,
    )
    device_file = Path(args.config_file) if args.config_file else None
    node_file = Path(args.node_config_file) if args.node_config_file else None
    cfg, problem = load_config(base, args.node_name, device_file, node_file)
    if problem is not None:
        log.error("readFromConfigFile err:%s", problem)
    cfg_json = json.dumps(dataclasses.asdict(cfg), default=sorted, sort_keys=True)
    log.info("reading config=%s resourceName %s configfile=%s", cfg_json, cfg.resource_name, args.config_file)
    log.info("\nRunning with config:\n%s", cfg_json)
    return cfg


def run(args: argparse.Namespace, stop: threading.Event, running: dict[str, Manager] | None = None) -> int:
    """Runs until ``stop`` is set; returns the exit code. ``running`` receives the manager (SIGHUP)."""
    if not args.node_name:
        log.error("NODE_NAME is not set: use --node-name or the NODE_NAME env")
        return 1
    if args.imex_required and not args.imex_channel_ids:
        log.error("--imex-required is set but no --imex-channel-ids are configured")
        return 1
    log.info("Initializing metrics for scheduler")
    try:
        cfg = config_from(args)
        disable = _env("DP_DISABLE_HEALTHCHECKS", "")
        policy = parse_xid_policy(disable, _env("DP_ENABLE_HEALTHCHECKS", ""))
        checks = parse_health_checks(args.health_checks, disable)
    except (ConfigError, ValueError) as exc:
        log.error("hami-device-plugin: %s", exc)
        return 1
    settings = settings_from(args)
    registry = CollectorRegistry()
    build_info("device-plugin", registry)
    metrics = PluginMetrics(registry, settings.node)
    metrics.set_config(cfg)
    tracing.start("hami-device-plugin", registry, args.enable_tracing)
    try:
        nvml = open_nvml(args.nvml, args.fake_nvml_spec)
    except (NvmlError, ValueError) as exc:
        log.error("nvml Init err: %s", exc)
        if args.fail_on_init_error:
            return 1
        log.info("No devices found. Waiting indefinitely.")
        wait_for_stop(stop)
        return 0
    try:
        api_client = new_api_client(from_args(args, user_agent="hami-device-plugin"), registry)
    except (KubeConfigError, ValueError) as exc:
        log.error("hami-device-plugin: %s", exc)
        nvml.close()
        return 1
    pods = Informer(
        api_client, ("", "v1", "pods"), field_selector=f"spec.nodeName={settings.node}", registry=registry
    )
    pods.start()
    try:
        server = serve_metrics(
            args.metrics_bind_address,
            registry,
            ready=lambda: (pods.has_synced(), "pod informer not synced"),
            web_config_file=args.web_config_file,
            profiling=args.profiling,
            name="hami-device-plugin",
            max_connections=args.web_max_connections,
        )
    except (OSError, WebConfigError) as exc:
        log.error("cannot serve metrics: %s (check --metrics-bind-address and --web.config.file)", exc)
        stop_within(lambda: _close(pods, nvml, api_client), "hami-device-plugin")
        return 1
    log.info("Serving metrics on %s/metrics", server.url)
    events = EventRecorder(api_client, "hami-device-plugin", settings.node, registry=registry)
    fatal: list[str] = []

    def give_up(message: str) -> None:
        fatal.append(message)
        stop.set()

    manager = Manager(
        settings,
        cfg,
        nvml=nvml,
        ops=NodeOps(api_client),
        pods=pods,
        metrics=metrics,
        policy=policy,
        checks=checks,
        events=events,
        retry_s=args.start_retry.total_seconds(),
        on_fatal=give_up,
    )
    if running is not None:
        running["manager"] = manager

    def shutdown() -> None:
        manager.stop()
        events.stop()
        server.stop()
        _close(pods, nvml, api_client)

    try:
        wait_unless_stopped(pods.wait_for_sync, stop, 30)
        if not stop.is_set():
            manager.start()
            wait_for_stop(stop)
    finally:
        stop_within(shutdown, "hami-device-plugin")
        tracing.shutdown()
    if fatal:
        log.fatal("hami-device-plugin: %s", fatal[0])  # klog.Fatalf: exit 255, as HAMi
    return 0


def _close(pods: Informer, nvml: Nvml, api_client: Any) -> None:
    pods.stop()
    nvml.close()
    api_client.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_profiling_flags(parser, args)
    klog.setup(args.v)
    if args.profiling_heap_from_start:
        start_tracing()  # the heap profile shows what was allocated before the request
    stop = threading.Event()
    holder: dict[str, Manager] = {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            log.info("Received SIGHUP, restarting.")
            mgr = holder.get("manager")
            if mgr is not None:
                mgr.restart()
            return
        log.info("Received signal %d, shutting down.", signum)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    return run(args, stop, holder)


if __name__ == "__main__":
    sys.exit(main())
