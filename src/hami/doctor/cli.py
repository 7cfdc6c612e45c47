"""What every hami-doctor command shares: the parser (exit 3 on bad arguments), the flag groups, the
cluster client and the checks' settings, and the report, its --fix and its exit status."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import IO, Any, NoReturn

from prometheus_client import CollectorRegistry

from hami.core.codec import CodecError
from hami.core.codec.nodelock import DEFAULT_TIMEOUT as DEFAULT_LOCK_TIMEOUT
from hami.core.codec.nodelock import format_rfc3339, parse_rfc3339
from hami.core.duration import duration_flag
from hami.core.kube import errors
from hami.core.kube.client import KubeConfigError, new_api_client
from hami.core.kube.options import add_kube_flags, from_args
from hami.core.promapi import PrometheusError
from hami.doctor import fetch, fix, render
from hami.doctor.findings import EXIT_CLUSTER, EXIT_USAGE, Section, exit_code
from hami.doctor.settings import DEFAULT_SCHEDULER_NAME, Settings


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


# The thresholds mirror HAMi's Go durations; a plain number of seconds, which this CLI has always
# accepted, still works.
duration = duration_flag(bare_seconds=True)


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


@dataclass(frozen=True)
class Flags:
    """The flag groups the commands take as parents."""

    when: Parser  # --now
    common: Parser  # --now, --json
    access: Parser  # how to reach the cluster and what the scheduler runs with (every cluster command)
    cluster: Parser  # access, and the checks' own thresholds and remedies (pod, nodes, node)


def flags() -> Flags:
    when = Parser(add_help=False)
    when.add_argument(
        "--now",
        type=parse_now,
        default=None,
        help="evaluate ages at this RFC3339 time instead of the clock (reproducible reports)",
    )
    common = Parser(add_help=False, parents=[when])
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    access = Parser(add_help=False)
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
        type=duration,
        default=None,
        help="the scheduler's --node-lock-timeout (default: read from --scheduler-url's metrics, else 5m; "
        "snapshot: read from the scheduler's pods)",
    )
    cluster = Parser(add_help=False, parents=[access])
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
        type=duration,
        default=timedelta(seconds=60),
        help="handshake expiry (default 60s, as HAMi v2.10's scheduler applies it)",
    )
    cluster.add_argument(
        "--bind-timeout",
        type=duration,
        default=None,
        help="bind-phase=allocating longer than this is stuck (default: --node-lock-timeout)",
    )
    cluster.add_argument(
        "--fix", action="store_true", help="apply the remedies the report offers (asks first)"
    )
    cluster.add_argument("--yes", action="store_true", help="with --fix: do not ask")
    return Flags(when, common, access, cluster)


def add_monitor_flags(p: argparse.ArgumentParser) -> None:
    """The vGPU monitor's findings beside the cluster's (pod, nodes, node)."""
    p.add_argument(
        "--prometheus-url",
        default=None,
        help="also show the vGPU monitor's reconciler findings (hami_inconsistency; for a running pod, "
        "its memory as HAMi-core and the driver account it) from this Prometheus",
    )
    p.add_argument("--monitor-job", default="hami-monitor", help="the monitor's scrape job")


def settings(args: argparse.Namespace) -> Settings:
    s = Settings(
        scheduler_name=args.scheduler_name,
        handshake_timeout=args.handshake_timeout,
        node_lock_timeout=args.node_lock_timeout or DEFAULT_LOCK_TIMEOUT,
        bind_timeout=args.bind_timeout or args.node_lock_timeout or DEFAULT_LOCK_TIMEOUT,
        scheduler_tz=args.scheduler_tz,
    )
    if args.scheduler_url and args.node_lock_timeout is None:
        # the scheduler's own expiry, so that an expired lock here is one it no longer enforces
        expiry = fetch.lock_timeout_from_url(args.scheduler_url)
        if expiry is not None:
            s = replace(s, node_lock_timeout=expiry, bind_timeout=args.bind_timeout or expiry)
    return s


def api_client(args: argparse.Namespace) -> Any:
    opts = replace(from_args(args, user_agent="hami-doctor"), context=args.context)
    return new_api_client(opts, registry=CollectorRegistry())


# A command's checks at the evaluation time: its sections, and the cluster client --fix writes
# through (None for the commands that do not read the cluster).
Check = Callable[[datetime], tuple[list[Section], Any]]


# What the cluster or Prometheus answered instead of data: EXIT_CLUSTER, with one line.
SOURCE_ERRORS = (KubeConfigError, errors.ApiError, PrometheusError)


def source_failure(exc: Exception) -> int:
    """Says on stderr why the cluster or Prometheus could not be read; the exit status for it."""
    why = str(exc) if isinstance(exc, PrometheusError) else f"cannot read the cluster: {exc}"
    print(f"hami-doctor: {why}", file=sys.stderr)
    return EXIT_CLUSTER


def diagnose(args: argparse.Namespace, stdin: IO[str], stdout: IO[str], check: Check) -> int:
    """Run the checks, apply --fix if asked, print the report; the exit status says the worst finding."""
    now = args.now or datetime.now(UTC)
    at = format_rfc3339(now)
    command = args.command + (f" {args.target}" if getattr(args, "target", None) else "")
    try:
        sections, api = check(now)
    except UsageError as exc:
        print(f"hami-doctor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SOURCE_ERRORS as exc:
        return source_failure(exc)
    applied = None
    if api is not None and args.fix:
        applied = _fix(api, sections, args.yes, stdin)
    stdout.write(
        render.to_json(command, at, sections, applied)
        if args.json
        else render.to_text(command, at, sections) + "".join(f"fix: {a}\n" for a in applied or [])
    )
    return exit_code(render.status(sections))


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
