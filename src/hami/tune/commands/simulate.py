"""``hami-tune simulate``: replay a snapshot under other settings. The command's parser, help and run
are the simulator's own (``hami.tune.simulate.cli``); this module puts them under hami-tune."""

from __future__ import annotations

import argparse

from hami.tune.simulate import cli


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    # the simulator's parser as the parent: its arguments, -h included, with its prog and description
    own = cli.build_parser()
    p = commands.add_parser(
        "simulate",
        parents=[own],
        add_help=False,
        prog=own.prog,
        description=own.description,
        formatter_class=own.formatter_class,
    )
    p.set_defaults(func=run, parser=p)


def run(args: argparse.Namespace) -> int:
    return cli.run(args)
