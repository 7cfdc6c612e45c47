"""``hami-doctor logs [FILE|DIR|-]``: the known scheduler and device-plugin log lines, counted, with
their meaning and action (DIR: each file)."""

from __future__ import annotations

import argparse
import os
from datetime import datetime
from typing import IO, Any

from hami.doctor import cli, logscan
from hami.doctor.findings import Section


def add_parser(commands: argparse._SubParsersAction[cli.Parser], flags: cli.Flags) -> None:
    p = commands.add_parser("logs", parents=[flags.common], help="explain scheduler/device-plugin log lines")
    p.add_argument(
        "file", nargs="?", default="-", metavar="FILE|DIR|-", help="a log file, a directory of them, or stdin"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace, stdin: IO[str], stdout: IO[str]) -> int:
    def check(now: datetime) -> tuple[list[Section], Any]:
        return scan(args.file, stdin), None

    return cli.diagnose(args, stdin, stdout, check)


def scan(path: str, stdin: IO[str]) -> list[Section]:
    """One section per log: stdin, the file, or every regular file of the directory (sorted)."""
    if path == "-":
        return [logscan.report(logscan.scan(stdin), "log <stdin>")]
    files = [path]
    if os.path.isdir(path):
        try:
            names = sorted(os.listdir(path))
        except OSError as exc:
            raise cli.UsageError(f"cannot read {path}: {exc.strerror}") from None
        files = [p for name in names if os.path.isfile(p := os.path.join(path, name))]
        if not files:
            raise cli.UsageError(f"{path} holds no log files")
    sections = []
    for name in files:
        try:
            with open(name, encoding="utf-8", errors="replace") as fh:
                sections.append(logscan.report(logscan.scan(fh), f"log {name}"))
        except OSError as exc:
            raise cli.UsageError(f"cannot read {name}: {exc.strerror}") from None
    return sections
