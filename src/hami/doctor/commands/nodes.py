"""``hami-doctor nodes [--selector S]``: registration, devices, handshake and lock of every node (the
single-node ``node NAME`` runs the same checks)."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import IO, Any

from hami.core.objects import annotations_of, name_of
from hami.core.promapi import PrometheusClient
from hami.doctor import cli, fetch, nodecheck, truth
from hami.doctor.findings import Section
from hami.doctor.settings import Settings


def add_parser(commands: argparse._SubParsersAction[cli.Parser], flags: cli.Flags) -> None:
    p = commands.add_parser(
        "nodes", parents=[flags.common, flags.cluster], help="check every node's HAMi annotations"
    )
    p.add_argument("--selector", default="", help="label selector for the nodes")
    cli.add_monitor_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, stdin: IO[str], stdout: IO[str]) -> int:
    def check(now: datetime) -> tuple[list[Section], Any]:
        api = cli.api_client(args)
        s = cli.settings(args)
        return check_nodes(args, api, fetch.list_nodes(api, args.selector), s, now), api

    return cli.diagnose(args, stdin, stdout, check)


def check_nodes(
    args: argparse.Namespace, api: Any, items: list[Any], s: Settings, now: datetime
) -> list[Section]:
    """One section per node, by name, with the monitor's findings for it when --prometheus-url is given."""
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


def _truth(args: argparse.Namespace, now: datetime) -> dict[str, dict[str, int]]:
    client = PrometheusClient(args.prometheus_url, timeout=30.0, at=now.timestamp())
    try:
        return truth.read(client.query, args.monitor_job)
    finally:
        client.close()
