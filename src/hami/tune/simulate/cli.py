"""hami-tune simulate: replay a scheduling snapshot (written by hami-doctor snapshot) through the
scheduler's engine under its own configuration and under each --set, and print the figures side by
side: pods placed and waiting, waiting times, GPU memory and core allocation, fragmentation and
over-commit headroom (docs/design/snapshot.md).

Exit status: 0 done; 2 the snapshot or a --set cannot be used (one line on stderr says why).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, NoReturn

from hami.core.snapshot import model as snap
from hami.core.snapshot import reader as snapread
from hami.tune.simulate import scenario as sc
from hami.tune.simulate.cluster import ClusterError
from hami.tune.simulate.measures import Fidelity, fidelity, summarise
from hami.tune.simulate.page import to_html
from hami.tune.simulate.records import SAMPLES
from hami.tune.simulate.replay import replay
from hami.tune.simulate.table import Outcome, to_json, to_text

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _scenario(text: str) -> sc.Scenario:
    try:
        return sc.parse_set(text)
    except sc.ScenarioError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="hami-tune simulate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("snapshot", type=Path, help="a snapshot file from hami-doctor snapshot")
    p.add_argument(
        "--set",
        dest="scenarios",
        type=_scenario,
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="an alternative configuration (repeat for more); keys: "
        + ", ".join(sc.KEYS)
        + "; deviceMemoryScaling@NODE= and deviceSplitCount@NODE= change one node",
    )
    p.add_argument(
        "--json", action="store_true", help="print JSON (figures, timelines, fidelity) instead of text"
    )
    p.add_argument(
        "--html", type=Path, default=None, metavar="FILE", help="also write the charts as an HTML page"
    )
    p.add_argument("--samples", type=int, default=SAMPLES, help=f"points per timeline (default {SAMPLES})")
    return p


def simulate(
    snapshot: snap.Snapshot, scenarios: Sequence[sc.Scenario], samples: int = SAMPLES
) -> tuple[list[Outcome], Fidelity]:
    """The current configuration first, then each scenario in the same arrival order."""
    current = replay(snapshot, sc.CURRENT, samples)
    outcomes = [Outcome(current, summarise(current))]
    for s in scenarios:
        result = replay(snapshot, s, samples, order=current.order)
        outcomes.append(Outcome(result, summarise(result)))
    return outcomes, fidelity(current)


def run(args: argparse.Namespace, stdout: IO[str] | None = None) -> int:
    """``hami-tune simulate`` on arguments parsed by build_parser (hami.tune.commands.simulate)."""
    out = stdout or sys.stdout
    if args.samples < 2:
        print("hami-tune simulate: --samples must be at least 2", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        snapshot = snapread.load_snapshot(args.snapshot)
        outcomes, f = simulate(snapshot, args.scenarios, args.samples)
    except (snap.SnapshotError, ClusterError) as exc:
        print(f"hami-tune simulate: bad snapshot: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    path = str(args.snapshot)
    if args.html is not None:
        try:
            args.html.write_text(to_html(snapshot, path, outcomes, f), encoding="utf-8")
        except OSError as exc:
            print(f"hami-tune simulate: cannot write {args.html}: {exc.strerror}", file=sys.stderr)
            return EXIT_BAD_INPUT
    out.write(to_json(snapshot, path, outcomes, f) if args.json else to_text(snapshot, path, outcomes, f))
    return 0
