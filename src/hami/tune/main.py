"""hami-tune's entry point: one argparse subcommand per module of hami.tune.commands, each run by the
``func`` its parser sets; without a subcommand, hami-tune recommends (commands.recommend)."""

from __future__ import annotations

import argparse
import sys

from hami.tune.commands import defrag, recommend, report, simulate

# the subcommands a user names; anything else is the recommendation command's own arguments
NAMED = ("report", "defrag", "simulate")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hami-tune", add_help=False)
    commands = p.add_subparsers(dest="command", required=True)
    for command in (recommend, report, defrag, simulate):
        command.add_parser(commands)
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    if argv[:1] == [] or argv[0] not in NAMED:
        argv = ["recommend", *argv]
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # said by the command's parser, with its usage, as when each command parsed alone
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    code: int = args.func(args)
    return code
