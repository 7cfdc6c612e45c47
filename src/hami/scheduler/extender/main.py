"""``hami-scheduler`` (also ``python -m hami.scheduler``): the scheduler extender daemon, flags of §7.2.

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import timedelta

import yaml

from hami.core import klog
from hami.core.duration import duration_flag, format_duration
from hami.core.kube.client import KubeConfigError
from hami.core.kube.options import add_kube_flags, from_args
from hami.core.lifecycle import stop_within, wait_for_stop
from hami.core.profiling import PROFILING_HELP, add_heap_from_start_flag, check_profiling_flags, start_tracing
from hami.core.serve import WebConfigError, add_web_flags
from hami.core.tracing import add_tracing_flag
from hami.scheduler.engine.decision import FilterConfig
from hami.scheduler.engine.device_config import DeviceConfigError, load_nvidia_config
from hami.scheduler.engine.policy import DEFAULT_GPU_POLICY, DEFAULT_NODE_POLICY
from hami.scheduler.extender.daemon import Extender, Options
from hami.scheduler.extender.decisions import DEFAULT_CAPACITY
from hami.scheduler.extender.nodelock import default_timeout

log = klog.get_logger("hami.scheduler")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return value


def _bool(text: str) -> bool:
    if text.lower() in ("1", "t", "true", "yes"):
        return True
    if text.lower() in ("0", "f", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hami-scheduler", description=__doc__)
    p.add_argument("--http_bind", default="127.0.0.1:8080", help="extender (and webhook) HTTP address")
    p.add_argument("--cert_file", default="", help="TLS certificate (TLS when both files are set; reloaded)")
    p.add_argument("--key_file", default="", help="TLS key")
    p.add_argument(
        "--client-ca-file",
        default="",
        help="CA of the client certificate /filter and /bind require (kube-scheduler's extender "
        "tlsConfig certFile/keyFile); needs --cert_file and --key_file",
    )
    p.add_argument(
        "--webhook-bind",
        default="",
        help="serve /webhook on this address instead (TLS from --cert_file/--key_file, no client "
        "certificate: the API server calls it)",
    )
    p.add_argument("--scheduler-name", default="", help="name set by the webhook; event source")
    p.add_argument("--node-scheduler-policy", default=DEFAULT_NODE_POLICY, help="binpack or spread")
    p.add_argument(
        "--gpu-scheduler-policy", default=DEFAULT_GPU_POLICY, help="binpack, spread or topology-aware"
    )
    p.add_argument("--metrics-bind-address", default=":9395", help="metrics listener")
    p.add_argument("--node-label-selector", default="", help="k=v,k2=v2: nodes the register pass considers")
    p.add_argument("--profiling", nargs="?", const=True, default=False, type=_bool, help=PROFILING_HELP)
    add_heap_from_start_flag(p)
    # Go durations as in HAMi, except that a negative one is refused: HAMi would take it and treat
    # every lock as expired (or give up the PodGroup retry at once).
    p.add_argument(
        "--node-lock-timeout",
        type=duration_flag(),
        default=default_timeout(),
        help="node-lock expiry, Go duration (default 5m, or $HAMI_NODELOCK_EXPIRE)",
    )
    p.add_argument(
        "--node-lock-retry-timeout",
        type=duration_flag(),
        default=timedelta(seconds=28),
        help="PodGroup lock retry budget in bind (0s disables)",
    )
    p.add_argument("--force-overwrite-default-scheduler", nargs="?", const=True, default=True, type=_bool)
    p.add_argument(
        "--leader-elect",
        nargs="?",
        const=True,
        default=False,
        type=_bool,
        help="follow kube-scheduler's Lease; only the leader binds",
    )
    p.add_argument("--leader-elect-resource-name", default="")
    p.add_argument("--leader-elect-resource-namespace", default="")
    p.add_argument(
        "--leader-elect-identity",
        default="",
        help="identity prefix of the Lease holder (default: the hostname)",
    )
    p.add_argument(
        "--legacy-metrics",
        nargs="?",
        const=True,
        default=False,
        type=_bool,
        help="also export HAMi's pre-2.9 CamelCase metric names",
    )
    p.add_argument(
        "--vgpu-node-label",
        nargs="?",
        const=True,
        default=False,
        type=_bool,
        help="label each bound pod hami.io/vgpu-node (one pod patch per bind), for HAMi's own device "
        "plugin and vGPU monitor, which list pods by it; this project's device plugin sets it itself",
    )
    p.add_argument("--debug", nargs="?", const=True, default=False, type=_bool, help="accepted, no effect")
    p.add_argument(
        "--decision-records",
        type=_positive,
        default=DEFAULT_CAPACITY,
        help="pods whose latest filter/bind verdict is kept for /debug/decisions (LRU; default %(default)s)",
    )
    p.add_argument("--device-config-file", default="", help="HAMi device config YAML")
    add_tracing_flag(p)
    add_kube_flags(p)
    add_web_flags(p)
    klog.add_log_flags(p)
    return p


def options(args: argparse.Namespace) -> Options:
    if args.client_ca_file and not (args.cert_file and args.key_file):
        raise ValueError("--client-ca-file needs --cert_file and --key_file (mutual TLS is TLS first)")
    nvidia = load_nvidia_config(None)
    if args.device_config_file:
        with open(args.device_config_file, encoding="utf-8") as fh:
            nvidia = load_nvidia_config(yaml.safe_load(fh))
    return Options(
        http_bind=args.http_bind,
        cert_file=args.cert_file,
        key_file=args.key_file,
        client_ca_file=args.client_ca_file,
        webhook_bind=args.webhook_bind,
        web_config_file=args.web_config_file,
        max_connections=args.web_max_connections,
        scheduler_name=args.scheduler_name,
        filter=FilterConfig(nvidia, args.node_scheduler_policy, args.gpu_scheduler_policy),
        metrics_bind=args.metrics_bind_address,
        node_label_selector=args.node_label_selector,
        kube=from_args(args, user_agent="hami-scheduler"),
        profiling=args.profiling,
        node_lock_timeout=args.node_lock_timeout,
        node_lock_retry_timeout=args.node_lock_retry_timeout.total_seconds(),
        force_overwrite_default_scheduler=args.force_overwrite_default_scheduler,
        leader_elect=args.leader_elect,
        leader_elect_resource_name=args.leader_elect_resource_name,
        leader_elect_resource_namespace=args.leader_elect_resource_namespace,
        leader_identity=args.leader_elect_identity,
        legacy_metrics=args.legacy_metrics,
        vgpu_node_label=args.vgpu_node_label,
        pod_name=os.environ.get("POD_NAME", ""),
        pod_namespace=os.environ.get("POD_NAMESPACE", ""),
        decision_records=args.decision_records,
        enable_tracing=args.enable_tracing,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_profiling_flags(parser, args)
    klog.setup(args.v)
    if args.profiling_heap_from_start:
        start_tracing()  # before the caches fill, so the heap profile shows what holds them
    try:
        opts = options(args)
        extender = Extender(opts)
    except (OSError, yaml.YAMLError, DeviceConfigError, KubeConfigError, ValueError) as err:
        log.fatal("hami-scheduler: %s", err)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        extender.start()  # stops whatever it started before it raises
    except OSError as err:
        log.fatal(
            "hami-scheduler: cannot listen: %s (change --http_bind, --webhook-bind or "
            "--metrics-bind-address)", err,
        )
    except WebConfigError as err:
        log.fatal("hami-scheduler: %s", err)
    assert extender.http is not None and extender.metrics_server is not None
    log.info(
        "hami-scheduler extender on %s, metrics on %s (node lock timeout %s, leader-elect %s)",
        extender.http.url,
        extender.metrics_server.url,
        format_duration(opts.node_lock_timeout),
        opts.leader_elect,
    )
    wait_for_stop(done)
    stop_within(extender.stop, "hami-scheduler")
    return 0


if __name__ == "__main__":
    sys.exit(main())
