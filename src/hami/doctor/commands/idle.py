"""``hami-doctor idle --prometheus-url URL``: the pods holding vGPU memory with no kernel run, as a
reclaim table (the query and the table are hami.doctor.idle)."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from typing import IO, Any

from hami.core import thresholds
from hami.core.promapi import PrometheusClient
from hami.doctor import cli, idle
from hami.doctor.findings import Section


def add_parser(commands: argparse._SubParsersAction[cli.Parser], flags: cli.Flags) -> None:
    p = commands.add_parser(
        "idle", parents=[flags.common], help="pods holding vGPU memory without running kernels"
    )
    p.add_argument("--prometheus-url", required=True, help="base URL of the Prometheus scraping the monitor")
    p.add_argument(
        "--monitor-job", default="hami-monitor", help="the monitor's scrape job (default %(default)s)"
    )
    p.add_argument(
        "--idle-for",
        type=cli.duration,
        default=timedelta(seconds=thresholds.load()["thresholds"]["idle_seconds"]),
        help="no kernel for this long is idle (default: HAMiVGPUIdle's threshold, idle_seconds in the "
        "thresholds file)",
    )
    p.add_argument("--timeout", type=float, default=30.0, help="HTTP timeout per query, seconds")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, stdin: IO[str], stdout: IO[str]) -> int:
    def check(now: datetime) -> tuple[list[Section], Any]:
        return [section(args, now)], None

    return cli.diagnose(args, stdin, stdout, check)


def section(args: argparse.Namespace, now: datetime) -> Section:
    if args.idle_for <= timedelta(0):
        raise cli.UsageError(f"--idle-for must be positive, got {args.idle_for}")
    client = PrometheusClient(args.prometheus_url, timeout=args.timeout, at=now.timestamp())
    try:
        pods = idle.find_idle(client.query, args.monitor_job, args.idle_for)
    finally:
        client.close()
    return idle.idle_section(pods, args.monitor_job, args.idle_for, now)
