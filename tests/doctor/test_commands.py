"""hami-doctor's layout: each subcommand is the module of hami.doctor.commands named after it, and
its parser runs that module."""

from __future__ import annotations

import argparse
import pkgutil

from hami.doctor import commands
from hami.doctor.main import build_parser


def test_each_subcommand_is_the_module_named_after_it() -> None:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(action.choices) == {m.name for m in pkgutil.iter_modules(commands.__path__)}
    for name, parser in action.choices.items():
        assert parser.get_default("func").__module__ == f"hami.doctor.commands.{name}"
