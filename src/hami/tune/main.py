"""hami-tune: read the Prometheus HTTP API and print tuning recommendations with their evidence.

Every recommendation is computed over --window (default 7d) and refused, naming the window, while
Prometheus holds less history than that. Sections cited (tuning.md §N) are in docs/guides/tuning.md.

Exit status: 0 every parameter has a recommendation; 3 at least one was refused for missing data or
history; 1 Prometheus could not be queried; 2 bad arguments or an unreadable configuration file.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta

import yaml

from hami.core.duration import duration_flag, prometheus_duration_flag
from hami.tune import patch, report
from hami.tune.collect import Settings, recommend_all
from hami.tune.promapi import PrometheusClient, PrometheusError

EXIT_REFUSED = 3


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hami-tune", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument(
        "--prometheus-url", required=True, help="base URL of Prometheus, e.g. http://localhost:9090"
    )
    p.add_argument(
        "--output",
        choices=("text", "json", "patch"),
        default="text",
        help="text (default), json, or patch: merge patches of the device configuration ConfigMaps",
    )
    p.add_argument("--json", action="store_true", help="same as --output json")
    p.add_argument(
        "--window",
        type=prometheus_duration_flag,  # it goes into PromQL range selectors as it is
        default="7d",
        help="history the peaks and rates are taken over, a Prometheus duration (default 7d)",
    )
    p.add_argument(
        "--device-config",
        type=argparse.FileType("r", encoding="utf-8"),
        help="with --output patch: the current device-config.yaml (kubectl -n hami-system get configmap "
        "hami-device-config -o jsonpath='{.data.device-config\\.yaml}')",
    )
    p.add_argument(
        "--node-config",
        type=argparse.FileType("r", encoding="utf-8"),
        help="with --output patch: the device plugin's current node config.json, for per-node scaling",
    )
    p.add_argument("--namespace", default="hami-system", help="namespace of the ConfigMaps (patch)")
    p.add_argument("--device-configmap", default="hami-device-config", help="device config ConfigMap (patch)")
    p.add_argument(
        "--node-configmap", default="hami-device-plugin-node-config", help="node config ConfigMap (patch)"
    )
    p.add_argument("--time", type=float, default=None, help="evaluation time, unix seconds (default: now)")
    p.add_argument("--timeout", type=float, default=30.0, help="HTTP timeout per query, seconds")
    p.add_argument("--monitor-job", default="hami-monitor")
    p.add_argument("--scheduler-job", default="hami-scheduler")
    p.add_argument("--device-plugin-job", default="hami-device-plugin")
    p.add_argument(
        "--node-lock-expire",
        type=duration_flag(bare_seconds=True),
        default=timedelta(minutes=5),
        help="the scheduler's current --node-lock-timeout (a Go duration, or seconds), used only when the "
        "extender does not export hami_scheduler_node_lock_timeout_seconds (default 5m)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    output = "json" if args.json else args.output
    if output == "patch" and args.device_config is None:
        parser.error("--output patch needs --device-config FILE: the patch carries the whole device config")
    settings = Settings(
        window=args.window,
        monitor_job=args.monitor_job,
        scheduler_job=args.scheduler_job,
        deviceplugin_job=args.device_plugin_job,
        node_lock_expire_seconds=args.node_lock_expire.total_seconds(),
    )
    client = PrometheusClient(args.prometheus_url, timeout=args.timeout, at=args.time)
    try:
        recs = recommend_all(client.query, settings)
    except PrometheusError as exc:
        print(f"hami-tune: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    if output == "json":
        meta = {
            "prometheus_url": args.prometheus_url,
            "time": args.time if args.time is not None else time.time(),
            "window": args.window,
        }
        print(report.to_json(recs, meta))
    elif output == "patch":
        node_config = args.node_config.read() if args.node_config is not None else None
        names = (args.namespace, args.device_configmap, args.node_configmap)
        try:
            print(patch.render(recs, args.device_config.read(), node_config, names), end="")
        except (patch.PatchError, ValueError, yaml.YAMLError) as exc:
            print(f"hami-tune: cannot patch the configuration: {exc}", file=sys.stderr)
            return 2
    else:
        print(report.to_text(recs), end="")
    return EXIT_REFUSED if any(r.refused for r in recs) else 0
