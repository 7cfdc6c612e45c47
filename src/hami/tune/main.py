"""hami-tune: read the Prometheus HTTP API and print tuning recommendations with their evidence.

  hami-tune --prometheus-url URL [--verify SNAPSHOT]   recommendations (checked by a simulation)
  hami-tune simulate SNAPSHOT [--set KEY=VALUE]...    replay a snapshot under other settings

Exit status: 0 every parameter has a recommendation; 3 at least one was refused for missing data;
1 Prometheus could not be queried; 2 the snapshot cannot be used.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from pathlib import Path

from hami.core import snapshot as snap
from hami.core.duration import duration_flag, prometheus_duration_flag
from hami.core.promapi import PrometheusClient, PrometheusError
from hami.tune import report
from hami.tune.collect import Settings, recommend_all
from hami.tune.simulate import cli as simulate_cli
from hami.tune.simulate import verify
from hami.tune.simulate.cluster import ClusterError

EXIT_REFUSED = 3
EXIT_BAD_SNAPSHOT = 2


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
    p.add_argument(
        "--verify",
        type=Path,
        default=None,
        metavar="SNAPSHOT",
        help="replay each recommendation against a snapshot (hami-doctor snapshot) and print what it "
        "would change",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["simulate"]:
        return simulate_cli.main(argv[1:])
    args = build_parser().parse_args(argv)
    snapshot = None
    if args.verify is not None:
        try:
            snapshot = snap.load_snapshot(args.verify)
        except snap.SnapshotError as exc:
            print(f"hami-tune: --verify: bad snapshot: {exc}", file=sys.stderr)
            return EXIT_BAD_SNAPSHOT
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
    checks = None
    if snapshot is not None:
        try:
            checks = verify.verify(recs, snapshot)
        except ClusterError as exc:
            print(f"hami-tune: --verify: bad snapshot: {exc}", file=sys.stderr)
            return EXIT_BAD_SNAPSHOT
    if args.json:
        meta: dict[str, object] = {
            "prometheus_url": args.prometheus_url,
            "time": args.time if args.time is not None else time.time(),
            "window": args.window,
        }
        if checks is not None:
            meta["verification"] = verify.to_json(*checks, str(args.verify))
        print(report.to_json(recs, meta))
    else:
        print(report.to_text(recs), end="")
        if checks is not None:
            print(verify.to_text(*checks, str(args.verify)), end="")
    return EXIT_REFUSED if any(r.refused for r in recs) else 0
