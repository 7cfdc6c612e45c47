"""Generate the hami Grafana dashboards (dashboards/*.json) with grafana-foundation-sdk.

Run `PYTHONPATH=src python -m dashboards.generate` after editing; `--check` fails when a checked-in
JSON is stale.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.cog.encoder import JSONEncoder

from dashboards.capacity import capacity
from dashboards.cluster import cluster_overview, container_workloads, node_and_device
from dashboards.internals import device_plugin, scheduler
from dashboards.panels import Board
from dashboards.tuning import tuning

HERE = Path(__file__).resolve().parent
BOARDS: tuple[Callable[[], Board], ...] = (
    cluster_overview,
    node_and_device,
    container_workloads,
    scheduler,
    device_plugin,
    tuning,
    capacity,
)


def render_all() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    out = {}
    for make in BOARDS:
        board = make().builder.build()
        out[f"{board.uid}.json"] = json.dumps(board, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a checked-in dashboard is stale")
    args = parser.parse_args(argv)
    stale = []
    for name, text in render_all().items():
        path = HERE / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(
            f"stale dashboards: {', '.join(stale)}: run PYTHONPATH=src python -m dashboards.generate",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
