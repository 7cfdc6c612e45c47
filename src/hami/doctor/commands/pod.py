"""``hami-doctor pod NAMESPACE/NAME``: the pod-pending tree to the diagnosis and, for a running pod
with vGPUs, whether HAMi-core limits it."""

from __future__ import annotations

import argparse
import os
from datetime import datetime
from typing import IO, Any

from hami.core import thresholds, tracing
from hami.core.hamicore import HostLayout
from hami.core.kube import errors
from hami.core.promapi import PrometheusClient
from hami.doctor import accounting, cli, fetch, gpulimit, podtree
from hami.doctor.findings import OK, Finding, Section


def add_parser(commands: argparse._SubParsersAction[cli.Parser], flags: cli.Flags) -> None:
    p = commands.add_parser("pod", parents=[flags.common, flags.cluster], help="diagnose a pending pod")
    p.add_argument("target", metavar="NAMESPACE/NAME")
    p.add_argument(
        "--hook-path",
        default=os.environ.get("HOOK_PATH", "/usr/local"),
        help="the device plugin's HOOK_PATH on this node, for the GPU-limit checks of a running pod "
        "(default $HOOK_PATH or %(default)s)",
    )
    cli.add_monitor_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, stdin: IO[str], stdout: IO[str]) -> int:
    def check(now: datetime) -> tuple[list[Section], Any]:
        api = cli.api_client(args)
        return diagnose(args, api, now), api

    return cli.diagnose(args, stdin, stdout, check)


def diagnose(args: argparse.Namespace, api: Any, now: datetime) -> list[Section]:
    s = cli.settings(args)
    namespace, sep, name = args.target.partition("/")
    if not sep or not namespace or not name:
        raise cli.UsageError(f"pod must be NAMESPACE/NAME, got {args.target!r}")
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
        raise cli.UsageError(f"pod {args.target} not found") from None
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


def _accounting(
    args: argparse.Namespace, now: datetime, namespace: str, name: str, mode: str
) -> list[Finding]:
    client = PrometheusClient(args.prometheus_url, timeout=30.0, at=now.timestamp())
    try:
        readings = accounting.read(client.query, args.monitor_job, namespace, name)
    finally:
        client.close()
    return accounting.findings(readings, mode, thresholds.load()["thresholds"]["shim_underreport_bytes"])
