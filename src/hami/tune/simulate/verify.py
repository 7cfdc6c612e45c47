"""``hami-tune --verify SNAPSHOT``: each recommendation replayed against the snapshot before it is
applied, with what it would change.

``deviceMemoryScaling`` (with its per-node values), ``deviceSplitCount`` and ``nodeLockExpire``
become scenarios; the API client's QPS and burst are not simulated (the replay does not model the
API server's throughput) and say so; a refused recommendation has nothing to check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hami.core.duration import DurationError, parse_duration
from hami.core.snapshot import model as snap
from hami.tune.recommend import Recommendation
from hami.tune.simulate import scenario as sc
from hami.tune.simulate.cli import simulate
from hami.tune.simulate.measures import Fidelity, Summary
from hami.tune.simulate.table import ROWS, Outcome, fidelity_line

NOT_SIMULATED = {
    "--kube-qps/--kube-burst": "not simulated: the replay does not model the API server's throughput",
}


@dataclass(frozen=True)
class Check:
    parameter: str
    value: str | None
    skipped: str = ""  # why it was not simulated
    changes: tuple[str, ...] = ()  # "<figure>: <current> -> <with it>"
    better: tuple[str, ...] = ()
    worse: tuple[str, ...] = ()
    summary: Summary | None = None


def scenario_for(rec: Recommendation) -> sc.Scenario | str:
    """The recommendation as a scenario, or why it cannot be one."""
    if rec.refused or rec.value is None:
        return "refused: nothing to check"
    if rec.parameter in NOT_SIMULATED:
        return NOT_SIMULATED[rec.parameter]
    name = f"{rec.parameter}={rec.value}"
    try:
        if rec.parameter == "deviceMemoryScaling":
            per_node = {
                key.removeprefix("node/"): float(v)
                for key, v in rec.details.items()
                if key.startswith("node/")
            }
            return sc.Scenario(name=name, memory_scaling=float(rec.value), node_memory_scaling=per_node)
        if rec.parameter == "deviceSplitCount":
            return sc.Scenario(name=name, split_count=int(rec.value))
        if rec.parameter == "nodeLockExpire":
            return sc.Scenario(name=name, node_lock_expire=parse_duration(rec.value).total_seconds())
    except (ValueError, DurationError) as err:
        return f"cannot simulate {rec.value!r}: {err}"
    return "not simulated: the replay has no model of this setting"


def _changes(base: Summary, s: Summary) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    changes: list[str] = []
    better: list[str] = []
    worse: list[str] = []
    for row in ROWS:
        a, b = row.value(base), row.value(s)
        if a == b:
            continue
        label = row.label.strip()
        changes.append(f"{label}: {row.fmt(a)} -> {row.fmt(b)}")
        if row.lower_is_better is not None:
            (better if (b < a) == row.lower_is_better else worse).append(label)
    return tuple(changes), tuple(better), tuple(worse)


def verify(recs: Sequence[Recommendation], snapshot: snap.Snapshot) -> tuple[list[Check], Fidelity]:
    """Replay the snapshot under its own configuration and under each checkable recommendation."""
    scenarios: list[sc.Scenario] = []
    planned: list[tuple[Recommendation, sc.Scenario | str]] = []
    for rec in recs:
        s = scenario_for(rec)
        planned.append((rec, s))
        if isinstance(s, sc.Scenario):
            scenarios.append(s)
    outcomes, fidelity = simulate(snapshot, scenarios)
    by_name: dict[str, Outcome] = {o.summary.scenario: o for o in outcomes[1:]}
    base = outcomes[0].summary
    checks: list[Check] = []
    for rec, s in planned:
        if isinstance(s, str):
            checks.append(Check(rec.parameter, rec.value, skipped=s))
            continue
        summary = by_name[s.name].summary
        changes, better, worse = _changes(base, summary)
        checks.append(
            Check(rec.parameter, rec.value, changes=changes, better=better, worse=worse, summary=summary)
        )
    return checks, fidelity


def to_text(checks: Sequence[Check], fidelity: Fidelity, path: str) -> str:
    lines = [f"verification: each recommendation replayed against {path}", f"  {fidelity_line(fidelity)}"]
    for c in checks:
        head = f"  {c.parameter}={c.value}" if c.value is not None else f"  {c.parameter}"
        if c.skipped:
            lines.append(f"{head}: {c.skipped}")
            continue
        if not c.changes:
            lines.append(f"{head}: changes nothing in this history")
            continue
        verdict = "worse for " + ", ".join(c.worse) if c.worse else "no figure gets worse"
        lines.append(f"{head}: {verdict}")
        lines += [f"    {change}" for change in c.changes]
    return "\n".join(lines) + "\n"


def to_json(checks: Sequence[Check], fidelity: Fidelity, path: str) -> dict[str, Any]:
    return {
        "snapshot": path,
        "agreement": fidelity.agreement if fidelity.compared else None,
        "checks": [
            {
                "parameter": c.parameter,
                "value": c.value,
                "simulated": not c.skipped,
                "skipped": c.skipped or None,
                "changes": list(c.changes),
                "better": list(c.better),
                "worse": list(c.worse),
            }
            for c in checks
        ],
    }
