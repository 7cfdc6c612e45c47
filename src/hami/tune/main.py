"""hami-tune: read the Prometheus HTTP API and print tuning recommendations with their evidence.

Exit status: 0 every parameter has a recommendation; 3 at least one was refused for missing data;
1 Prometheus could not be queried.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta

from hami.core.duration import duration_flag, prometheus_duration_flag
from hami.tune import report
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
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument(
        "--window",
        type=prometheus_duration_flag,  # it goes into PromQL range selectors as it is
        default="7d",
        help="history the peaks and rates are taken over, a Prometheus duration (default 7d)",
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
    args = build_parser().parse_args(argv)
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
    if args.json:
        meta = {
            "prometheus_url": args.prometheus_url,
            "time": args.time if args.time is not None else time.time(),
            "window": args.window,
        }
        print(report.to_json(recs, meta))
    else:
        print(report.to_text(recs), end="")
    return EXIT_REFUSED if any(r.refused for r in recs) else 0
