"""hami-tune's layout: each subcommand is the module of hami.tune.commands named after it, and its
parser runs that module (the recommendation command is hami-tune without a subcommand)."""

from __future__ import annotations

import argparse
import pkgutil

from hami.tune import commands
from hami.tune.main import NAMED, build_parser, parse_args


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_each_subcommand_is_the_module_named_after_it() -> None:
    parsers = _subcommands()
    assert set(parsers) == {m.name for m in pkgutil.iter_modules(commands.__path__)}
    for name, parser in parsers.items():
        assert parser.get_default("func").__module__ == f"hami.tune.commands.{name}"
    assert set(NAMED) == set(parsers) - {"recommend"}


def test_without_a_subcommand_hami_tune_recommends() -> None:
    args = parse_args(["--prometheus-url", "http://prometheus:9090"])
    assert args.command == "recommend"
    assert parse_args(["report", "--prometheus-url", "http://prometheus:9090"]).command == "report"
