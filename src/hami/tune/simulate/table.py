"""The side-by-side text table and the JSON document of a simulation."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from hami.core.snapshot import model as snap
from hami.core.snapshot import writer as snapwrite
from hami.tune.simulate.measures import Fidelity, Summary
from hami.tune.simulate.records import ReplayResult


@dataclass(frozen=True)
class Outcome:
    """One scenario's replay and its figures."""

    result: ReplayResult
    summary: Summary


def duration(seconds: float) -> str:
    """``45s``, ``12m``, ``3h20m``, ``2d4h``: two units at most."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        m, rest = divmod(s, 60)
        return f"{m}m{rest}s" if rest and m < 10 else f"{m}m"
    if s < 86400:
        h, rest = divmod(s, 3600)
        return f"{h}h{rest // 60}m" if rest // 60 else f"{h}h"
    d, rest = divmod(s, 86400)
    return f"{d}d{rest // 3600}h" if rest // 3600 else f"{d}d"


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%"


def _mib(x: float) -> str:
    return f"{x / 1024:.1f} GiB"


def _delta(value: float, base: float, fmt: Callable[[float], str], lower_is_better: bool) -> str:
    if value == base:
        return ""
    better = (value < base) == lower_is_better
    return f" ({'+' if value > base else '-'}{fmt(abs(value - base))}{'' if better else ' !'})"


@dataclass(frozen=True)
class Row:
    label: str
    value: Callable[[Summary], float]
    fmt: Callable[[float], str]
    lower_is_better: bool | None  # None: no judgement (context, not an outcome)


def _int(x: float) -> str:
    return str(round(x))


ROWS: tuple[Row, ...] = (
    Row("pods placed", lambda s: s.placed, _int, False),
    Row("still waiting at the end", lambda s: s.pending_end, _int, True),
    Row("placed after waiting", lambda s: s.waited, _int, True),
    Row("wait p50", lambda s: s.wait_p50, duration, True),
    Row("wait p95", lambda s: s.wait_p95, duration, True),
    Row("wait max", lambda s: s.wait_max, duration, True),
    Row("GPU memory allocated, mean", lambda s: s.mem_mean, _pct, None),
    Row("GPU memory allocated, peak", lambda s: s.mem_peak, _pct, None),
    Row("  peak against physical memory", lambda s: s.mem_physical_peak, _pct, None),
    Row("GPU cores allocated, mean", lambda s: s.cores_mean, _pct, None),
    Row("GPU cores allocated, peak", lambda s: s.cores_peak, _pct, None),
    Row("fragmentation, mean", lambda s: s.fragmentation_mean, _pct, True),
    Row("fragmentation at the end", lambda s: s.fragmentation_end, _pct, True),
    Row("over-commit headroom, least card", lambda s: s.headroom_mib, _mib, False),
    Row("cards allocated past physical", lambda s: s.overcommitted_cards, _int, True),
    Row("binds refused by stuck locks", lambda s: s.bind_failures, _int, True),
    Row("node time under stuck locks", lambda s: s.locked_node_seconds, duration, True),
)
PEAK_ROW = Row(
    "headroom if every pod peaked at once",
    lambda s: s.peak_headroom_mib or 0,
    _mib,
    False,
)


def cell(row: Row, s: Summary, base: Summary | None) -> str:
    text = row.fmt(row.value(s))
    if row.label == "pods placed":
        text += f" / {s.pods}"
    if base is None or row.lower_is_better is None:
        return text
    return text + _delta(row.value(s), row.value(base), row.fmt, row.lower_is_better)


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")


def heading(snapshot: snap.Snapshot, path: str, cards: int) -> str:
    return (
        f"{path}: {len(snapshot.nodes)} nodes ({cards} cards), {len(snapshot.pods)} GPU pods, "
        f"{_when(snapshot.start)} to {_when(snapshot.taken)} ({duration(snapshot.taken - snapshot.start)}), "
        f"from {snapshot.source}"
    )


def fidelity_line(f: Fidelity) -> str:
    tied = sum(1 for d in f.differences if d.tied)
    if f.compared:
        line = (
            f"fidelity: replaying the current configuration gives {f.same} of {f.compared} pods "
            f"({f.agreement * 100:.1f}%) the node and cards the snapshot recorded"
        )
    else:
        line = "fidelity: not measured: the snapshot records no placement by the scheduler to compare with"
    if f.differences:
        line += f"; {len(f.differences)} differ ({tied} created in the same second as another pod)"
    if f.not_compared:
        line += (
            f"; {f.not_compared} not compared (placed after pods the snapshot lacks took cards: "
            "see the notes)"
        )
    return line


def to_text(snapshot: snap.Snapshot, path: str, outcomes: Sequence[Outcome], f: Fidelity) -> str:
    base = outcomes[0].summary
    rows = [*ROWS, PEAK_ROW] if base.peak_headroom_mib is not None else list(ROWS)
    header = ["", *(o.summary.scenario for o in outcomes)]
    body = [
        [row.label, *(cell(row, o.summary, None if i == 0 else base) for i, o in enumerate(outcomes))]
        for row in rows
    ]
    widths = [max(len(r[c]) for r in (header, *body)) for c in range(len(header))]
    lines = [heading(snapshot, path, outcomes[0].result.capacity.cards), ""]
    for r in (header, *body):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    lines += [
        "",
        "(+/-: change from current; '!' marks a change for the worse)",
        f"typical request: {base.typical_mib} MiB, {base.typical_cores} cores of one card "
        f"(fragmentation is free memory on cards that cannot take it)",
        fidelity_line(f),
    ]
    lines += [f"note: {n}" for n in snapshot.notes]
    for o in outcomes:
        lines += [f"note ({o.summary.scenario}): {n}" for n in o.result.notes]
    return "\n".join(lines) + "\n"


def scenario_settings(o: Outcome, snapshot: snap.Snapshot) -> dict[str, Any]:
    s, sched = o.result.scenario, snapshot.scheduler
    return {
        "nodeSchedulerPolicy": s.node_policy or sched.node_policy,
        "gpuSchedulerPolicy": s.gpu_policy or sched.gpu_policy,
        "nodeLockExpireSeconds": o.result.cluster.lock_expire,
        "deviceSplitCount": s.split_count,
        "deviceMemoryScaling": s.memory_scaling,
        "deviceCoreScaling": s.core_scaling,
        "perNode": {
            **{f"deviceMemoryScaling@{n}": v for n, v in s.node_memory_scaling.items()},
            **{f"deviceSplitCount@{n}": v for n, v in s.node_split_count.items()},
        },
    }


def to_json(snapshot: snap.Snapshot, path: str, outcomes: Sequence[Outcome], f: Fidelity) -> str:
    doc = {
        "snapshot": {
            "path": path,
            "source": snapshot.source,
            "start": snapwrite.format_time(snapshot.start),
            "taken": snapwrite.format_time(snapshot.taken),
            "nodes": len(snapshot.nodes),
            "pods": len(snapshot.pods),
            "notes": list(snapshot.notes),
        },
        "fidelity": {
            "compared": f.compared,
            "same": f.same,
            "agreement": f.agreement if f.compared else None,
            "notCompared": f.not_compared,
            "differences": [
                {
                    "pod": d.pod,
                    "recorded": _place(d.real),
                    "replayed": _place(d.replayed),
                    "sameSecond": d.tied,
                }
                for d in f.differences
            ],
        },
        "scenarios": [
            {
                "name": o.summary.scenario,
                "settings": scenario_settings(o, snapshot),
                "summary": asdict(o.summary),
                "notes": o.result.notes,
                "timeline": [asdict(s) for s in o.result.samples],
            }
            for o in outcomes
        ],
    }
    return json.dumps(doc, indent=1) + "\n"


def _place(p: tuple[str | None, tuple[tuple[str, ...], ...]]) -> dict[str, Any]:
    return {"node": p[0], "cards": [list(c) for c in p[1]]}
