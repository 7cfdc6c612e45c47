"""``hami-tune report``: the chargeback report (``hami.tune.chargeback``: GPU memory and core time per
pod over a window) as text or CSV; its --help describes it in that module's words."""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta

from hami.core.duration import duration_flag, prometheus_duration_flag
from hami.core.promapi import PrometheusClient, PrometheusError
from hami.tune import chargeback
from hami.tune.cli import EXIT_REFUSED


def _price(text: str) -> tuple[str, float]:
    model, sep, price = text.rpartition("=")
    try:
        value = float(price)
    except ValueError:
        value = -1.0
    if not sep or not model or not value >= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give MODEL=PRICE, a GPU model as the device_type label names it and a price per "
            "card-hour >= 0, e.g. NVIDIA-A100=2.5"
        )
    return model, value


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = commands.add_parser(
        "report",
        prog="hami-tune report",
        description=chargeback.__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument("--prometheus-url", required=True, help="base URL of Prometheus")
    p.add_argument(
        "--since",
        type=prometheus_duration_flag,
        default="7d",
        help="the window that ends at --time, a Prometheus duration (default 7d)",
    )
    p.add_argument(
        "--step",
        type=duration_flag(bare_seconds=True),
        default=timedelta(minutes=1),
        help="integration step, a Go duration or seconds; at most the rules' evaluation interval "
        "(default 1m)",
    )
    p.add_argument("--format", choices=("text", "csv"), default="text")
    p.add_argument(
        "--price",
        type=_price,
        action="append",
        default=[],
        metavar="MODEL=PRICE",
        help="price of one card-hour of a GPU model (repeatable); adds the cost columns",
    )
    p.add_argument("--time", type=float, default=None, help="end of the window, unix seconds (default: now)")
    p.add_argument("--timeout", type=float, default=60.0, help="HTTP timeout per query, seconds")
    p.set_defaults(func=run, parser=p)


def run(args: argparse.Namespace) -> int:
    p: argparse.ArgumentParser = args.parser
    step_s = int(args.step.total_seconds())
    if step_s < 1:
        p.error(f"--step {args.step}: must be at least 1s")
    client = PrometheusClient(args.prometheus_url, timeout=args.timeout, at=args.time)
    try:
        rows = chargeback.collect(client.query, args.since, step_s, dict(args.price))
    except PrometheusError as exc:
        print(f"hami-tune report: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    if not rows:
        print(
            "hami-tune report: no chargeback series in the window; load alerts/hami-rules.yaml into "
            "Prometheus (group hami-chargeback.rules), or backfill them with "
            "`promtool tsdb create-blocks-from rules`",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    print(chargeback.to_csv(rows) if args.format == "csv" else chargeback.to_text(rows), end="")
    return 0
