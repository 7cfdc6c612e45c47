"""hami-doctor: diagnose HAMi from the API server (pods, nodes) or from logs.

  hami-doctor pod NAMESPACE/NAME    walk the pod-pending tree to the diagnosis; for a running pod
                                    with vGPUs, whether HAMi-core limits it (--hook-path)
  hami-doctor nodes [--selector S]  registration, devices, handshake and lock of every node
  hami-doctor node NAME             the same for one node
  hami-doctor logs [FILE|DIR|-]     known scheduler/device-plugin log lines, counted (DIR: each file)
  hami-doctor idle --prometheus-url URL
                                    pods holding vGPU memory with no kernel run: a reclaim table
  hami-doctor snapshot -o FILE      write a scheduling snapshot for hami-tune simulate

Reads only (GET/LIST). --fix applies the guides' remedies the report offers (clear a stale,
dangling or malformed node lock; drop a handshake the scheduler will not refresh) after asking;
--yes skips the question.

Exit status: 0 healthy (info findings included), 1 warning, 2 broken, 3 usage error (bad arguments,
unknown pod or node, unreadable log), 4 the cluster (or, for idle and a history snapshot,
Prometheus) could not be reached or read. ``snapshot`` exits 0 once the file is written.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import IO, Any, NoReturn

from prometheus_client import CollectorRegistry

from hami.core import thresholds, tracing
from hami.core.codec import CodecError
from hami.core.codec.nodelock import DEFAULT_TIMEOUT as DEFAULT_LOCK_TIMEOUT
from hami.core.codec.nodelock import format_rfc3339, parse_rfc3339
from hami.core.duration import duration_flag
from hami.core.hamicore import HostLayout
from hami.core.kube import errors
from hami.core.kube.client import KubeConfigError, new_api_client
from hami.core.kube.options import add_kube_flags, from_args
from hami.core.objects import annotations_of, name_of
from hami.core.promapi import PrometheusClient, PrometheusError
from hami.doctor import accounting, fetch, fix, gpulimit, idle, logscan, nodecheck, podtree, render, truth
from hami.doctor import snapshot as snapshot_cmd
from hami.doctor.findings import EXIT_CLUSTER, EXIT_USAGE, OK, Finding, Section, exit_code
from hami.doctor.settings import DEFAULT_SCHEDULER_NAME, Settings


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


# The thresholds mirror HAMi's Go durations; a plain number of seconds, which this CLI has always
# accepted, still works.
_duration = duration_flag(bare_seconds=True)


def parse_zone(text: str) -> tzinfo | None:
    if text == "local":
        return None
    if text.upper() == "UTC":
        return UTC
    try:
        return parse_rfc3339(f"2000-01-01T00:00:00{text}").tzinfo
    except CodecError:
        raise argparse.ArgumentTypeError(f"not a zone: {text!r} (local, UTC or +08:00)") from None


def parse_now(text: str) -> datetime:
    try:
        return parse_rfc3339(text)
    except CodecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hami-doctor", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    when = _Parser(add_help=False)
    when.add_argument(
        "--now",
        type=parse_now,
        default=None,
        help="evaluate ages at this RFC3339 time instead of the clock (reproducible reports)",
    )
    common = _Parser(add_help=False, parents=[when])
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    # How to reach the cluster and what the scheduler runs with (every cluster command).
    access = _Parser(add_help=False)
    add_kube_flags(access)
    access.add_argument("--context", default=None, help="kubeconfig context to use (default: current)")
    access.add_argument(
        "--scheduler-name",
        default=DEFAULT_SCHEDULER_NAME,
        help="the HAMi scheduler's --scheduler-name (default %(default)s)",
    )
    access.add_argument("--scheduler-namespace", default="", help="where its pods run (default: all)")
    access.add_argument(
        "--scheduler-tz",
        type=parse_zone,
        default=None,
        help="zone of the scheduler's handshake timestamps: local (default), UTC, +08:00",
    )
    access.add_argument(
        "--node-lock-timeout",
        type=_duration,
        default=None,
        help="the scheduler's --node-lock-timeout (default: read from --scheduler-url's metrics, else 5m; "
        "snapshot: read from the scheduler's pods)",
    )
    # The checks' own thresholds and remedies (pod, nodes, node).
    cluster = _Parser(add_help=False, parents=[access])
    cluster.add_argument(
        "--scheduler-url",
        default="",
        help="the scheduler's metrics address (e.g. http://127.0.0.1:9395), for its decision record; "
        "default: its metrics Service through the API server",
    )
    cluster.add_argument(
        "--scheduler-lease",
        default="",
        metavar="NS/NAME",
        help="the kube-scheduler Lease the extender follows with --leader-elect",
    )
    cluster.add_argument(
        "--handshake-timeout",
        type=_duration,
        default=timedelta(seconds=60),
        help="handshake expiry (default 60s, as HAMi v2.10's scheduler applies it)",
    )
    cluster.add_argument(
        "--bind-timeout",
        type=_duration,
        default=None,
        help="bind-phase=allocating longer than this is stuck (default: --node-lock-timeout)",
    )
    cluster.add_argument(
        "--fix", action="store_true", help="apply the remedies the report offers (asks first)"
    )
    cluster.add_argument("--yes", action="store_true", help="with --fix: do not ask")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    pod = sub.add_parser("pod", parents=[common, cluster], help="diagnose a pending pod")
    pod.add_argument("target", metavar="NAMESPACE/NAME")
    pod.add_argument(
        "--hook-path",
        default=os.environ.get("HOOK_PATH", "/usr/local"),
        help="the device plugin's HOOK_PATH on this node, for the GPU-limit checks of a running pod "
        "(default $HOOK_PATH or %(default)s)",
    )
    nodes = sub.add_parser("nodes", parents=[common, cluster], help="check every node's HAMi annotations")
    nodes.add_argument("--selector", default="", help="label selector for the nodes")
    node = sub.add_parser("node", parents=[common, cluster], help="check one node's HAMi annotations")
    node.add_argument("target", metavar="NAME")
    for p_ in (nodes, node, pod):
        p_.add_argument(
            "--prometheus-url",
            default=None,
            help="also show the vGPU monitor's reconciler findings (hami_inconsistency; for a running pod, "
            "its memory as HAMi-core and the driver account it) from this Prometheus",
        )
        p_.add_argument("--monitor-job", default="hami-monitor", help="the monitor's scrape job")
    logs = sub.add_parser("logs", parents=[common], help="explain scheduler/device-plugin log lines")
    logs.add_argument(
        "file", nargs="?", default="-", metavar="FILE|DIR|-", help="a log file, a directory of them, or stdin"
    )
    idle_p = sub.add_parser("idle", parents=[common], help="pods holding vGPU memory without running kernels")
    idle_p.add_argument(
        "--prometheus-url", required=True, help="base URL of the Prometheus scraping the monitor"
    )
    idle_p.add_argument(
        "--monitor-job", default="hami-monitor", help="the monitor's scrape job (default %(default)s)"
    )
    idle_p.add_argument(
        "--idle-for",
        type=_duration,
        default=timedelta(seconds=thresholds.load()["thresholds"]["idle_seconds"]),
        help="no kernel for this long is idle (default: HAMiVGPUIdle's threshold, idle_seconds in the "
        "thresholds file)",
    )
    idle_p.add_argument("--timeout", type=float, default=30.0, help="HTTP timeout per query, seconds")
    snapshot = sub.add_parser(
        "snapshot", parents=[when, access], help="write a scheduling snapshot for hami-tune simulate"
    )
    snapshot_cmd.add_arguments(snapshot)
    return p


def _settings(args: argparse.Namespace) -> Settings:
    return Settings(
        scheduler_name=args.scheduler_name,
        handshake_timeout=args.handshake_timeout,
        node_lock_timeout=args.node_lock_timeout or DEFAULT_LOCK_TIMEOUT,
        bind_timeout=args.bind_timeout or args.node_lock_timeout or DEFAULT_LOCK_TIMEOUT,
        scheduler_tz=args.scheduler_tz,
    )


def _api(args: argparse.Namespace) -> Any:
    opts = replace(from_args(args, user_agent="hami-doctor"), context=args.context)
    return new_api_client(opts, registry=CollectorRegistry())


def _cluster_sections(args: argparse.Namespace, api: Any, now: datetime) -> list[Section]:
    s = _settings(args)
    if args.scheduler_url and args.node_lock_timeout is None:
        # the scheduler's own expiry, so that an expired lock here is one it no longer enforces
        expiry = fetch.lock_timeout_from_url(args.scheduler_url)
        if expiry is not None:
            s = replace(s, node_lock_timeout=expiry, bind_timeout=args.bind_timeout or expiry)
    if args.command == "pod":
        namespace, sep, name = args.target.partition("/")
        if not sep or not namespace or not name:
            raise UsageError(f"pod must be NAMESPACE/NAME, got {args.target!r}")
        try:
            cluster = fetch.pod_cluster(
                api,
                namespace,
                name,
                scheduler_namespace=args.scheduler_namespace,
                lease_ref=args.scheduler_lease,
                scheduler_url=args.scheduler_url,
            )
        except errors.NotFound:
            raise UsageError(f"pod {args.target} not found") from None
        mode = accounting.enforcement(cluster.pod, cluster.nodes)
        limits = gpulimit.diagnose(cluster.pod, HostLayout(args.hook_path.rstrip("/") or "/"), mode)
        if limits is not None and args.prometheus_url:
            limits.findings += _accounting(args, now, namespace, name, mode)
        section = podtree.diagnose_pod(cluster, s, now)
        trace = tracing.trace_id(cluster.pod)
        if trace:  # the scheduler runs with --enable-tracing: where this pod's spans are
            section.findings.append(Finding(
                OK, "pod.trace", f"trace ID {trace}",
                (f"from {tracing.ANNOTATION}; look it up in the tracing backend (Jaeger: /trace/{trace})",),
            ))
        return [section, *([limits] if limits is not None else [])]
    if args.command == "node":
        try:
            items = [fetch.get_node(api, args.target)]
        except errors.NotFound:
            raise UsageError(f"node {args.target} not found") from None
    else:
        items = fetch.list_nodes(api, args.selector)
    owners = fetch.lock_owners(api, items)
    plugin_pods = fetch.device_plugin_pods(api)
    found = _truth(args, now) if args.prometheus_url else {}
    sections = []
    for n in sorted(items, key=name_of):
        value = annotations_of(n).get("hami.io/mutex.lock", "")
        key = "/".join(value.split(",")[1:]) if value.count(",") == 2 else ""
        section = nodecheck.check_node(n, owners.get(key) if key else None, s, now, plugin_pods)
        section.findings.extend(truth.findings(found.get(name_of(n), {})))
        sections.append(section)
    return sections


def _accounting(
    args: argparse.Namespace, now: datetime, namespace: str, name: str, mode: str
) -> list[Finding]:
    client = PrometheusClient(args.prometheus_url, timeout=30.0, at=now.timestamp())
    try:
        readings = accounting.read(client.query, args.monitor_job, namespace, name)
    finally:
        client.close()
    return accounting.findings(readings, mode, thresholds.load()["thresholds"]["shim_underreport_bytes"])


def _truth(args: argparse.Namespace, now: datetime) -> dict[str, dict[str, int]]:
    client = PrometheusClient(args.prometheus_url, timeout=30.0, at=now.timestamp())
    try:
        return truth.read(client.query, args.monitor_job)
    finally:
        client.close()


def main(argv: list[str] | None = None, stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> int:
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    args = build_parser().parse_args(argv)
    now = args.now or datetime.now(UTC)
    at = format_rfc3339(now)
    command = args.command + (f" {args.target}" if getattr(args, "target", None) else "")
    if args.command == "snapshot":
        return _snapshot(args, stdout)
    try:
        if args.command == "logs":
            sections = _logs(args.file, stdin)
            api = None
        elif args.command == "idle":
            sections = [_idle(args, now)]
            api = None
        else:
            api = _api(args)
            sections = _cluster_sections(args, api, now)
    except UsageError as exc:
        print(f"hami-doctor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (KubeConfigError, errors.ApiError) as exc:
        print(f"hami-doctor: cannot read the cluster: {exc}", file=sys.stderr)
        return EXIT_CLUSTER
    except PrometheusError as exc:
        print(f"hami-doctor: {exc}", file=sys.stderr)
        return EXIT_CLUSTER
    applied = None
    if api is not None and args.fix:
        applied = _fix(api, sections, args.yes, stdin)
    stdout.write(
        render.to_json(command, at, sections, applied)
        if args.json
        else render.to_text(command, at, sections) + "".join(f"fix: {a}\n" for a in applied or [])
    )
    return exit_code(render.status(sections))


def _snapshot(args: argparse.Namespace, stdout: IO[str]) -> int:
    try:
        # From Prometheus, the cluster is read only for its configuration, and only when named.
        api = None if args.from_prometheus and not args.kubeconfig else _api(args)
        return snapshot_cmd.run(args, api, stdout)
    except snapshot_cmd.SnapshotUsageError as exc:
        print(f"hami-doctor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (KubeConfigError, errors.ApiError) as exc:
        print(f"hami-doctor: cannot read the cluster: {exc}", file=sys.stderr)
        return EXIT_CLUSTER
    except PrometheusError as exc:
        print(f"hami-doctor: {exc}", file=sys.stderr)
        return EXIT_CLUSTER


def _fix(api: Any, sections: list[Section], yes: bool, stdin: IO[str]) -> list[str]:
    todo = fix.remedies(sections)
    if not todo:
        return []

    def ask(prompt: str) -> str:
        sys.stderr.write(prompt)
        sys.stderr.flush()
        return stdin.readline()

    if not yes and not fix.confirm(todo, ask):
        return ["nothing changed (not confirmed)"]
    return fix.apply(api, todo)


def _idle(args: argparse.Namespace, now: datetime) -> Section:
    if args.idle_for <= timedelta(0):
        raise UsageError(f"--idle-for must be positive, got {args.idle_for}")
    client = PrometheusClient(args.prometheus_url, timeout=args.timeout, at=now.timestamp())
    try:
        pods = idle.find_idle(client.query, args.monitor_job, args.idle_for)
    finally:
        client.close()
    return idle.idle_section(pods, args.monitor_job, args.idle_for, now)


def _logs(path: str, stdin: IO[str]) -> list[Section]:
    """One section per log: stdin, the file, or every regular file of the directory (sorted)."""
    if path == "-":
        return [logscan.report(logscan.scan(stdin), "log <stdin>")]
    files = [path]
    if os.path.isdir(path):
        try:
            names = sorted(os.listdir(path))
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}") from None
        files = [p for name in names if os.path.isfile(p := os.path.join(path, name))]
        if not files:
            raise UsageError(f"{path} holds no log files")
    sections = []
    for name in files:
        try:
            with open(name, encoding="utf-8", errors="replace") as fh:
                sections.append(logscan.report(logscan.scan(fh), f"log {name}"))
        except OSError as exc:
            raise UsageError(f"cannot read {name}: {exc.strerror}") from None
    return sections
