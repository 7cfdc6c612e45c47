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
import sys
from typing import IO

from hami.doctor import cli
from hami.doctor.commands import idle, logs, node, nodes, pod, snapshot


def build_parser() -> argparse.ArgumentParser:
    """One argparse subcommand per module of hami.doctor.commands; each parser's func runs it."""
    p = cli.Parser(
        prog="hami-doctor", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    flags = cli.flags()
    commands = p.add_subparsers(dest="command", required=True, parser_class=cli.Parser)
    for command in (pod, nodes, node, logs, idle, snapshot):
        command.add_parser(commands, flags)
    return p


def main(argv: list[str] | None = None, stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args, stdin or sys.stdin, stdout or sys.stdout)
    return code
