"""Rendering recommendations as text for people and JSON for machines."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from hami.tune.recommend import Recommendation


def _value(v: float | None) -> str:
    return "no data" if v is None else f"{v:.6g}"


def _too_early(rec: Recommendation) -> bool:
    """A refusal because Prometheus holds less history than --window (recommend.short_history)."""
    return rec.refused and "needed_seconds" in rec.details and "history_seconds" in rec.details


def _minutes(seconds: float) -> str:
    return f"{math.ceil(seconds / 60)}m"


def early_banner(recs: list[Recommendation], at: float | None) -> str | None:
    """One line for the refusals that only time will lift, with when to retry; None when there are none."""
    early = [r for r in recs if _too_early(r)]
    if not early:
        return None
    need = max(float(r.details["needed_seconds"]) for r in early)
    have = min(float(r.details["history_seconds"]) for r in early)
    wait = max(60.0, need - have)
    when = ""
    if at is not None:
        retry = datetime.fromtimestamp(at + wait, UTC).strftime("%H:%M UTC")
        when = f" (at {retry})"
    return (
        f"too early: Prometheus holds only {_minutes(have)} of history and {len(early)} recommendation(s) "
        f"below are computed over --window {early[0].details.get('window', '')}: retry in about "
        f"{_minutes(wait)}{when}, or pass a --window the history covers"
    )


def to_text(recs: list[Recommendation], at: float | None = None) -> str:
    lines: list[str] = []
    banner = early_banner(recs, at)
    if banner is not None:
        lines += [banner, ""]
    for rec in recs:
        early = _too_early(rec)
        if early:
            lines.append(f"{rec.parameter}: NO RECOMMENDATION (too early, see above)")
        elif rec.refused:
            lines.append(f"{rec.parameter}: NO RECOMMENDATION")
        else:
            current = f"   (current: {rec.current})" if rec.current is not None else "   (current: unknown)"
            lines.append(f"{rec.parameter}: {rec.value}{current}")
        if not early:  # the banner said it once
            lines.extend(f"  - {reason}" for reason in rec.reasons)
        if rec.start is not None:
            lines.append(f"  starting point without history, not measured: {rec.start}")
        if rec.missing and not early:
            lines.append(f"  missing series: {', '.join(rec.missing)}")
        extra = {k: v for k, v in rec.details.items() if not k.startswith("node/") and not early}
        if extra:
            lines.append("  " + ", ".join(f"{k}={v}" for k, v in extra.items()))
        lines.append("  evidence:")
        for ev in rec.evidence:
            where = f" {{{ev.label}}}" if ev.label else ""
            lines.append(f"    {ev.query}")
            lines.append(f"      ={where} {_value(ev.value)}")
        lines.append("")
    lines.append("Every § cited is a section of docs/guides/tuning.md.")
    return "\n".join(lines) + "\n"


def to_json(recs: list[Recommendation], meta: dict[str, Any]) -> str:
    doc = {
        **meta,
        "recommendations": [
            {
                "parameter": r.parameter,
                "status": "refused" if r.refused else "recommended",
                "value": r.value,
                "current": r.current,
                "reasons": list(r.reasons),
                "missing": list(r.missing),
                "start": r.start,
                "details": r.details,
                "evidence": [{"query": e.query, "labels": e.label, "value": e.value} for e in r.evidence],
            }
            for r in recs
        ],
    }
    return json.dumps(doc, indent=2, sort_keys=False)
