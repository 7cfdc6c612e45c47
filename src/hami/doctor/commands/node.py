"""``hami-doctor node NAME``: registration, devices, handshake and lock of one node (the checks of
``nodes``)."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import IO, Any

from hami.core.kube import errors
from hami.doctor import cli, fetch
from hami.doctor.commands import nodes
from hami.doctor.findings import Section


def add_parser(commands: argparse._SubParsersAction[cli.Parser], flags: cli.Flags) -> None:
    p = commands.add_parser(
        "node", parents=[flags.common, flags.cluster], help="check one node's HAMi annotations"
    )
    p.add_argument("target", metavar="NAME")
    cli.add_monitor_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, stdin: IO[str], stdout: IO[str]) -> int:
    def check(now: datetime) -> tuple[list[Section], Any]:
        api = cli.api_client(args)
        s = cli.settings(args)
        try:
            items = [fetch.get_node(api, args.target)]
        except errors.NotFound:
            raise cli.UsageError(f"node {args.target} not found") from None
        return nodes.check_nodes(args, api, items, s, now), api

    return cli.diagnose(args, stdin, stdout, check)
