"""Rendering recommendations as text for people and JSON for machines."""

from __future__ import annotations

import json
from typing import Any

from hami.tune.recommend import Recommendation


def _value(v: float | None) -> str:
    return "no data" if v is None else f"{v:.6g}"


def to_text(recs: list[Recommendation]) -> str:
    lines: list[str] = []
    for rec in recs:
        if rec.refused:
            lines.append(f"{rec.parameter}: NO RECOMMENDATION")
        else:
            current = f"   (current: {rec.current})" if rec.current is not None else "   (current: unknown)"
            lines.append(f"{rec.parameter}: {rec.value}{current}")
        lines.extend(f"  - {reason}" for reason in rec.reasons)
        if rec.start is not None:
            lines.append(f"  starting point without history, not measured: {rec.start}")
        if rec.missing:
            lines.append(f"  missing series: {', '.join(rec.missing)}")
        extra = {k: v for k, v in rec.details.items() if not k.startswith("node/")}
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
