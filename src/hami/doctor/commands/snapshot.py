"""``hami-doctor snapshot -o FILE``: write a scheduling snapshot for hami-tune simulate. The snapshot's
arguments and writing are hami.doctor.snapshot's; this module puts them under hami-doctor."""

from __future__ import annotations

import argparse
import sys
from typing import IO

from hami.doctor import cli
from hami.doctor import snapshot as snapshot_cmd
from hami.doctor.findings import EXIT_USAGE


def add_parser(commands: argparse._SubParsersAction[cli.Parser], flags: cli.Flags) -> None:
    p = commands.add_parser(
        "snapshot",
        parents=[flags.when, flags.access],
        help="write a scheduling snapshot for hami-tune simulate",
    )
    snapshot_cmd.add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, stdin: IO[str], stdout: IO[str]) -> int:
    try:
        # From Prometheus, the cluster is read only for its configuration, and only when named.
        api = None if args.from_prometheus and not args.kubeconfig else cli.api_client(args)
        return snapshot_cmd.run(args, api, stdout)
    except snapshot_cmd.SnapshotUsageError as exc:
        print(f"hami-doctor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except cli.SOURCE_ERRORS as exc:
        return cli.source_failure(exc)
