"""What-if simulator at scale: replay 1,000 nodes × 8 GPUs and 20,000 pod arrivals.

Run: PYTHONPATH=src python bench/bench_simulate.py [--nodes 1000] [--pods 20000] [--gap 2] [--life 14400]

A history is generated first (``hami.testing.history``: 40 GB and 16 GB cards, mixed requests,
exponential arrivals ``--gap`` seconds apart and lifetimes of ``--life`` seconds on average, played
through the scheduling engine at full time resolution) and written as a snapshot the way
``hami-doctor snapshot`` writes one (whole-second times). A child process then does what
``hami-tune simulate`` does, so its figures are the simulator's alone: load and check the file,
replay it under its own configuration (with the search for each second's order), replay it under one
alternative (``deviceSplitCount=5``: the found order, no search), and compare the first replay with
the recorded placements.

Figures beside the guide's targets for this 2-core machine: wall time of load + replay (< 60 s),
pods/s, the child's peak resident memory from ``getrusage`` (< 500 MiB), and the agreement (the
share of pods that get the node and cards the snapshot recorded; the fidelity test asks >= 95 %).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hami.core.snapshot import model as snap
from hami.core.snapshot import reader as snapread
from hami.core.snapshot import writer as snapwrite
from hami.doctor.capture import CaptureSettings, capture
from hami.testing.history import HistorySpec, generate
from hami.tune.simulate.measures import fidelity, summarise
from hami.tune.simulate.replay import replay
from hami.tune.simulate.scenario import CURRENT, parse_set

TARGET_SECONDS = 60.0
TARGET_MIB = 500.0


def child(path: Path) -> dict[str, float]:
    """Load, replay twice and compare, in this (fresh) process; the figures as a dict."""
    started = time.perf_counter()
    cpu = time.process_time()
    snapshot = snapread.load_snapshot(path)
    loaded = time.perf_counter()
    current = replay(snapshot, CURRENT)
    replayed = time.perf_counter()
    f = fidelity(current)
    alternative = replay(snapshot, parse_set("deviceSplitCount=5"), order=current.order)
    done = time.perf_counter()
    summary = summarise(current)
    return {
        "pods": len(snapshot.pods),
        "nodes": len(snapshot.nodes),
        "load_s": loaded - started,
        "replay_s": replayed - loaded,
        "alternative_s": done - replayed,
        "cpu_s": time.process_time() - cpu,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "agreement": f.agreement,
        "differences": len(f.differences),
        "waited": summary.waited,
        "pending_end": summary.pending_end,
        "alternative_placed": summarise(alternative).placed,
        "placed": summary.placed,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--pods", type=int, default=20000)
    p.add_argument("--gap", type=float, default=2.0, help="mean seconds between arrivals (default 2)")
    p.add_argument("--life", type=float, default=4 * 3600.0, help="mean seconds a pod runs (default 4h)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", type=Path, default=None, help="also write the snapshot here")
    p.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child)))
        return 0
    spec = HistorySpec(
        nodes=args.nodes,
        gpus=args.gpus,
        pods=args.pods,
        mean_gap=args.gap,
        mean_life=args.life,
        seed=args.seed,
    )
    started = time.perf_counter()
    history = generate(spec)
    s = capture(history.nodes, history.pods, [], history.taken, CaptureSettings(scheduler=snap.Scheduler()))
    generated = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as work:
        path = args.keep or Path(work) / "snapshot.json"
        snapwrite.save_snapshot(s, path)
        size = path.stat().st_size / 2**20
        print(
            f"history: {args.nodes} nodes x {args.gpus} GPUs, {args.pods} arrivals over "
            f"{(s.taken - s.start) / 3600:.1f} h, generated in {generated:.1f}s; snapshot {size:.1f} MiB"
        )
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(path)],
            capture_output=True,
            text=True,
            check=False,
            env=dict(os.environ),
        )
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
        return 1
    r = json.loads(out.stdout)
    total = r["load_s"] + r["replay_s"]
    print(
        f"load + check: {r['load_s']:.1f}s; replay (current, with the order search): {r['replay_s']:.1f}s; "
        f"CPU {r['cpu_s']:.1f}s for both replays"
    )
    print(
        f"simulate, current configuration: {total:.1f}s (target < {TARGET_SECONDS:.0f}s), "
        f"{r['pods'] / r['replay_s']:.0f} pods/s"
    )
    print(
        f"alternative (deviceSplitCount=5, order reused): {r['alternative_s']:.1f}s, "
        f"{r['pods'] / r['alternative_s']:.0f} pods/s; placed {r['alternative_placed']} vs {r['placed']}"
    )
    print(f"peak memory of the simulator process: {r['peak_mib']:.0f} MiB (target < {TARGET_MIB:.0f} MiB)")
    print(
        f"agreement with the recorded placements: {r['agreement'] * 100:.2f}% "
        f"({r['differences']} differ; target >= 95%); {r['waited']} pods waited, {r['pending_end']} still "
        f"waiting at the end"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
