"""hami-tune: read the Prometheus HTTP API and print tuning recommendations with their evidence.

`hami-tune report --since 7d --format csv` prints the chargeback report instead, and `hami-tune defrag`
which nodes to drain so that pending requests find a card (see --help there).
`hami-tune simulate SNAPSHOT --set KEY=VALUE` replays a snapshot (hami-doctor snapshot) under other
settings, and --verify SNAPSHOT replays each recommendation against one before it is applied.

Every recommendation is computed over --window (default 7d) and refused, naming the window, while
Prometheus holds less history than that. Every § cited is a section of docs/guides/tuning.md.

Exit status: 0 every parameter has a recommendation; 3 at least one was refused for missing data or
history (its guide starting point, if any, is printed as such), or held where it is because a guard
had no data; 2 bad input: bad arguments, an
unreadable file, Prometheus unreachable or refusing a query, a window without samples, or series
without the labels hami-tune joins on.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from hami.core import names
from hami.core.duration import duration_flag, prometheus_duration_flag
from hami.core.promapi import PrometheusClient, PrometheusError
from hami.core.snapshot import model as snap
from hami.core.snapshot import reader as snapread
from hami.tune import compare, patch, render, tables, values
from hami.tune.cli import EXIT_BAD_SNAPSHOT, EXIT_REFUSED
from hami.tune.collect import InputError, Settings, preflight, recommend_all
from hami.tune.recommend import Recommendation
from hami.tune.simulate import verify
from hami.tune.simulate.cluster import ClusterError


def instant(text: str) -> float:
    """An evaluation time: unix seconds, or an ISO 8601 time (UTC unless it names its zone)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither unix seconds nor an ISO 8601 time such as 2025-06-01T12:00:00Z"
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    # hami-tune without a subcommand: its help and errors are hami-tune's own (see hami.tune.main)
    p = commands.add_parser(
        "recommend", prog="hami-tune", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument(
        "--prometheus-url", required=True, help="base URL of Prometheus, e.g. http://localhost:9090"
    )
    p.add_argument(
        "--output",
        choices=("text", "json", "patch", "values"),
        default="text",
        help="text (default), json, patch (merge patches of the device configuration ConfigMaps), or\n"
        "values (a Helm values file for charts/hami with only the keys the recommendations change)",
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
        help="with --output patch: the current device-config.yaml (kubectl -n "
        f"{names.NAMESPACE} get configmap {names.DEVICE_CONFIGMAP} "
        "-o jsonpath='{.data.device-config\\.yaml}')",
    )
    p.add_argument(
        "--node-config",
        type=argparse.FileType("r", encoding="utf-8"),
        help="with --output patch: the device plugin's current node config.json, for per-node scaling",
    )
    p.add_argument("--namespace", default=names.NAMESPACE, help="namespace of the ConfigMaps (patch)")
    p.add_argument(
        "--device-configmap", default=names.DEVICE_CONFIGMAP, help="device config ConfigMap (patch)"
    )
    p.add_argument("--node-configmap", default=names.NODE_CONFIGMAP, help="node config ConfigMap (patch)")
    p.add_argument(
        "--environment",
        choices=tables.ENVIRONMENTS,
        default="production",
        help="which template of the guide applies (gpuCorePolicy, libCudaLogLevel); default production",
    )
    p.add_argument(
        "--values",
        type=argparse.FileType("r", encoding="utf-8"),
        help="the Helm values in force (helm get values hami -a): the current gpuCorePolicy, "
        "libCudaLogLevel and monitor extraArgs (default: the chart's defaults)",
    )
    p.add_argument(
        "--scheduler-container",
        default=names.EXTENDER_CONTAINER,
        help="the extender's container name in kube-state-metrics and cAdvisor series",
    )
    p.add_argument(
        "--time", type=instant, default=None, help="evaluation time, unix seconds or ISO 8601 (default: now)"
    )
    p.add_argument(
        "--before",
        type=instant,
        help="with --after: compare every tuning quantity at two times (each over --window), e.g. a day\n"
        "before and a week after a change; unix seconds or ISO 8601",
    )
    p.add_argument("--after", type=instant, help="see --before")
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
    p.set_defaults(func=run, parser=p)


def run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    output = "json" if args.json else args.output
    if output == "patch" and args.device_config is None:
        parser.error("--output patch needs --device-config FILE: the patch carries the whole device config")
    if (args.before is None) != (args.after is None):
        parser.error("--before and --after go together")
    comparing = args.before is not None
    if comparing and output in ("patch", "values"):
        parser.error("--before/--after print the quantities (text or json), not a patch or values file")
    try:
        values_doc = values.parse(args.values.read()) if args.values is not None else {}
        current = values.current(values_doc)
    except values.ValuesError as exc:
        parser.error(f"--values: {exc}")
    if args.verify is not None and comparing:
        parser.error("--verify checks one set of recommendations, not --before/--after")
    snapshot = None
    if args.verify is not None:
        try:
            snapshot = snapread.load_snapshot(args.verify)
        except snap.SnapshotError as exc:
            print(f"hami-tune: --verify: bad snapshot: {exc}", file=sys.stderr)
            return EXIT_BAD_SNAPSHOT
    settings = Settings(
        window=args.window,
        monitor_job=args.monitor_job,
        scheduler_job=args.scheduler_job,
        deviceplugin_job=args.device_plugin_job,
        node_lock_expire_seconds=args.node_lock_expire.total_seconds(),
        environment=args.environment,
        scheduler_container=args.scheduler_container,
        **(current if args.values is not None else {}),
    )
    times = [args.before, args.after] if comparing else [args.time]
    answers: list[list[Recommendation]] = []
    for at in times:
        client = PrometheusClient(args.prometheus_url, timeout=args.timeout, at=at)
        try:
            preflight(client.query, settings)
            answers.append(recommend_all(client.query, settings))
        except (PrometheusError, InputError) as exc:
            when = f" at {_iso(at)}" if comparing and at is not None else ""
            print(f"hami-tune{when}: {exc}", file=sys.stderr)
            return 2
        finally:
            client.close()
    if comparing:
        rows = compare.compare(answers[0], answers[1])
        show = compare.to_json if output == "json" else compare.to_text
        print(show(rows, _iso(args.before), _iso(args.after)), end="" if output != "json" else "\n")
        return 0
    recs = answers[0]
    checks = None
    if snapshot is not None:
        try:
            checks = verify.verify(recs, snapshot)
        except ClusterError as exc:
            print(f"hami-tune: --verify: bad snapshot: {exc}", file=sys.stderr)
            return EXIT_BAD_SNAPSHOT
    if output == "json":
        meta: dict[str, object] = {
            "prometheus_url": args.prometheus_url,
            "time": args.time if args.time is not None else time.time(),
            "window": args.window,
        }
        if checks is not None:
            meta["verification"] = verify.to_json(*checks, str(args.verify))
        print(render.to_json(recs, meta))
    elif output == "patch":
        node_config = args.node_config.read() if args.node_config is not None else None
        names = (args.namespace, args.device_configmap, args.node_configmap)
        try:
            print(patch.render(recs, args.device_config.read(), node_config, names), end="")
        except (patch.PatchError, ValueError, yaml.YAMLError) as exc:
            print(f"hami-tune: cannot patch the configuration: {exc}", file=sys.stderr)
            return 2
    elif output == "values":
        print(values.render(recs, values_doc), end="")
    else:
        print(render.to_text(recs, args.time if args.time is not None else time.time()), end="")
        if checks is not None:
            print(verify.to_text(*checks, str(args.verify)), end="")
    # a value held back by a guard without data is missing data too: automation should see it
    return EXIT_REFUSED if any(r.refused or r.missing for r in recs) else 0


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
