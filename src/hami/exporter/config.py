"""Flags and environment of the vGPU monitor (§B.1), parsed without side effects.

``HAMI_RESYNC_INTERVAL`` is a Go duration as in HAMi; an invalid one keeps 5m with a warning. Unlike
HAMi, a negative one is invalid too (no resync interval is negative).

Section signs (§) refer to docs/design/node-agent-monitor.md.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hami.core import klog
from hami.core.duration import DurationError, parse_duration
from hami.core.kube.options import KubeOptions, add_kube_flags, from_args
from hami.core.profiling import add_heap_from_start_flag, add_profiling_flag, check_profiling_flags
from hami.core.serve import add_web_flags
from hami.core.serve.listener import DEFAULT_MAX_CONNECTIONS
from hami.core.tracing import add_tracing_flag

DEFAULT_BIND = ":9394"
DEFAULT_RESYNC_S = 300.0


class ConfigError(ValueError):
    """A missing or invalid setting; ``str()`` is the one line printed before exiting."""


@dataclass(frozen=True)
class Config:
    hook_path: str
    node_name: str
    bind: str = DEFAULT_BIND
    resync_s: float = DEFAULT_RESYNC_S
    legacy_metrics: bool = False
    profiling: bool = False
    profiling_heap_from_start: bool = False
    verbosity: int = 0
    web_config_file: str | None = None
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    pod_labels_allowlist: tuple[str, ...] = ()
    proc_root: str = "/proc"
    cgroup_root: str = "/sys/fs/cgroup"
    kube: KubeOptions = field(default_factory=KubeOptions)
    warnings: tuple[str, ...] = ()
    enable_tracing: bool = False  # hami.core.tracing


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hami-monitor", description="HAMi vGPU monitor (metrics on :9394)")
    p.add_argument("--metrics-bind-address", default=DEFAULT_BIND, help="address to serve /metrics on")
    p.add_argument("--legacy-metrics", action="store_true", help="also emit the pre-2.9 metric names")
    add_profiling_flag(p)
    add_heap_from_start_flag(p)
    p.add_argument(
        "--pod-labels-allowlist",
        default="",
        help="comma-separated pod label keys ('*' = all) exposed in hami_pod_labels_info",
    )
    p.add_argument(
        "--proc-root",
        default="/proc",
        help="the host's /proc (the monitor runs with hostPID), to find the pod of each GPU process",
    )
    p.add_argument(
        "--cgroup-root",
        default="/sys/fs/cgroup",
        help="the host's cgroup v2 root, where the driver's per-container memory accounting is read "
        "(dmem files; NVML is given each container cgroup's path under it)",
    )
    add_tracing_flag(p)
    klog.add_log_flags(p)
    add_kube_flags(p)
    add_web_flags(p)
    return p


def load_config(argv: Sequence[str], env: Mapping[str, str]) -> Config:
    """Flags from ``argv``, settings from ``env``; raises ``ConfigError`` on a missing requirement."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    check_profiling_flags(parser, args)
    hook_path = env.get("HOOK_PATH", "")
    if not hook_path:
        raise ConfigError(
            "failed to validate environment variables: required environment variable HOOK_PATH not set"
        )
    node = env.get("NODE_NAME", "")
    if not node:
        raise ConfigError(
            "failed to validate environment variables: required environment variable NODE_NAME not set"
        )
    warnings = []
    resync = DEFAULT_RESYNC_S
    if env.get("HAMI_RESYNC_INTERVAL"):
        try:
            resync = parse_duration(env["HAMI_RESYNC_INTERVAL"]).total_seconds()
        except DurationError as err:
            warnings.append(f"invalid HAMI_RESYNC_INTERVAL ({err}), using 5m")
    try:
        kube = from_args(args, user_agent="hami-monitor")
    except ValueError as err:
        raise ConfigError(f"invalid Kubernetes client flags: {err}") from err
    return Config(
        hook_path=hook_path,
        node_name=node,
        bind=args.metrics_bind_address,
        resync_s=resync,
        legacy_metrics=args.legacy_metrics,
        profiling=args.profiling,
        profiling_heap_from_start=args.profiling_heap_from_start,
        verbosity=args.v,
        web_config_file=args.web_config_file,
        max_connections=args.web_max_connections,
        pod_labels_allowlist=tuple(k.strip() for k in args.pod_labels_allowlist.split(",") if k.strip()),
        proc_root=args.proc_root,
        cgroup_root=args.cgroup_root,
        kube=kube,
        warnings=tuple(warnings),
        enable_tracing=args.enable_tracing,
    )
