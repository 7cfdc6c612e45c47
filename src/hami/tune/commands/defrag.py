"""``hami-tune defrag``: which pods to move off which node so that the pending GPU pods can run.

From a snapshot (``--snapshot``, or ``--kubeconfig``: the cluster as ``hami-doctor snapshot`` reads it
now) the plan goes through the scheduler's own filter (``hami.tune.drain``); from Prometheus
(``--prometheus-url``) it counts memory and split slots only (``hami.tune.defrag``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from hami.core.promapi import PrometheusClient, PrometheusError
from hami.core.snapshot import model as snap
from hami.core.snapshot import reader as snapread
from hami.tune import defrag, drain
from hami.tune.cli import EXIT_BAD_SNAPSHOT, EXIT_REFUSED
from hami.tune.simulate.cluster import ClusterError


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = commands.add_parser(
        "defrag", prog="hami-tune defrag", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--snapshot",
        type=Path,
        metavar="SNAPSHOT",
        help="plan from a snapshot of the cluster (hami-doctor snapshot --kubeconfig ...), through the\n"
        "scheduler's own filter: the pending pods' GPU type and UUID filters, numa-bind, cores and\n"
        "quotas decide where they may go",
    )
    source.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="plan from the cluster as it is now: --snapshot of what `hami-doctor snapshot --kubeconfig\n"
        "FILE` reads (run here, as that command)",
    )
    source.add_argument(
        "--prometheus-url",
        help="plan from the scheduler's and kube-state-metrics' series: memory and split slots only",
    )
    p.add_argument("--scheduler-job", default="hami-scheduler")
    p.add_argument("--ksm-selector", default='job="kube-state-metrics"', help="kube-state-metrics' series")
    p.add_argument("--time", type=float, default=None, help="evaluation time, unix seconds (default: now)")
    p.add_argument("--timeout", type=float, default=30.0, help="HTTP timeout per query, seconds")
    p.set_defaults(func=run, parser=p)


def run(args: argparse.Namespace) -> int:
    if args.snapshot is not None:
        return _defrag_snapshot(args.snapshot)
    if args.kubeconfig is not None:
        return _defrag_cluster(args.kubeconfig, args.timeout)
    client = PrometheusClient(args.prometheus_url, timeout=args.timeout, at=args.time)
    try:
        cards, tenants, pending = defrag.collect(client.query, args.scheduler_job, args.ksm_selector)
    except PrometheusError as exc:
        print(f"hami-tune defrag: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    if not cards:
        print(f'hami-tune defrag: no hami_gpu_memory_limit_bytes{{job="{args.scheduler_job}"}}: is the '
              "scheduler scraped under that job (--scheduler-job)?", file=sys.stderr)  # fmt: skip
        return EXIT_REFUSED
    result = defrag.plan(cards, tenants, pending)
    print(defrag.to_text(result), end="")
    return EXIT_REFUSED if result.unserved else 0


def _defrag_snapshot(path: Path) -> int:
    try:
        return _defrag_plan(snapread.load_snapshot(path))
    except snap.SnapshotError as exc:
        print(f"hami-tune defrag: bad snapshot: {exc}", file=sys.stderr)
        return EXIT_BAD_SNAPSHOT


def _defrag_cluster(kubeconfig: str, timeout: float) -> int:
    """The snapshot comes from hami-doctor's reading of the cluster (one implementation of it), run as
    its command: hami-tune does not import another component."""
    argv = [sys.executable, "-m", "hami.doctor", "snapshot", "-o", "-", "--kubeconfig", kubeconfig]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10 * timeout, check=False)
    except subprocess.TimeoutExpired:
        print(f"hami-tune defrag: reading the cluster took over {10 * timeout:g}s", file=sys.stderr)
        return EXIT_BAD_SNAPSHOT
    if done.returncode != 0:
        print(f"hami-tune defrag: {done.stderr.strip().removeprefix('hami-doctor: ')}", file=sys.stderr)
        return EXIT_BAD_SNAPSHOT
    try:
        return _defrag_plan(snapread.loads(done.stdout))
    except snap.SnapshotError as exc:
        print(f"hami-tune defrag: unexpected snapshot from hami-doctor: {exc}", file=sys.stderr)
        return EXIT_BAD_SNAPSHOT


def _defrag_plan(snapshot: snap.Snapshot) -> int:
    try:
        result = drain.plan(snapshot)
    except ClusterError as exc:
        print(f"hami-tune defrag: bad snapshot: {exc}", file=sys.stderr)
        return EXIT_BAD_SNAPSHOT
    print(drain.to_text(result), end="")
    return EXIT_REFUSED if result.unserved else 0
