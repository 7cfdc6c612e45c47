"""``hami-tune --before T --after T``: the tuning quantities at two times, side by side
(docs/guides/tuning.md §5.5, "compare the metrics before and after the change")."""

from __future__ import annotations

import json
from dataclasses import dataclass

from hami.tune.recommend import Recommendation


@dataclass(frozen=True)
class Row:
    parameter: str
    quantity: str  # a query and its labels, or "recommendation"
    before: str
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after


def _number(v: float | None) -> str:
    return "no data" if v is None else f"{v:.6g}"


def _rec(r: Recommendation | None) -> str:
    if r is None:
        return "absent"
    return (
        f"no measured value (start: {r.start})" if r.refused and r.start else r.value or "no measured value"
    )


def compare(before: list[Recommendation], after: list[Recommendation]) -> list[Row]:
    """Every recommendation and every number of its evidence, paired by parameter, query and labels."""
    rows: list[Row] = []
    after_by = {r.parameter: r for r in after}
    for b in before:
        a = after_by.get(b.parameter)
        rows.append(Row(b.parameter, "recommendation", _rec(b), _rec(a)))
        seen: dict[tuple[str, str], list[float | None]] = {}
        for e in b.evidence:
            seen.setdefault((e.query, e.label), [e.value, None])
        for e in a.evidence if a is not None else ():
            seen.setdefault((e.query, e.label), [None, None])[1] = e.value
        for (query, label), (bv, av) in seen.items():
            where = f" {{{label}}}" if label else ""
            rows.append(Row(b.parameter, f"{query}{where}", _number(bv), _number(av)))
    return rows


def to_text(rows: list[Row], before: str, after: str) -> str:
    lines = [f"before: {before}", f"after:  {after}", ""]
    parameter = None
    for row in rows:
        if row.parameter != parameter:
            parameter = row.parameter
            lines.append(f"{parameter}:")
        mark = "*" if row.changed else " "
        lines.append(f" {mark} {row.quantity}")
        lines.append(f"      {row.before} -> {row.after}")
    lines.append("")
    lines.append(f"{sum(r.changed for r in rows)} of {len(rows)} quantities changed (marked *).")
    return "\n".join(lines) + "\n"


def to_json(rows: list[Row], before: str, after: str) -> str:
    doc = {
        "before": before,
        "after": after,
        "quantities": [
            {"parameter": r.parameter, "quantity": r.quantity, "before": r.before, "after": r.after,
             "changed": r.changed}
            for r in rows
        ],
    }  # fmt: skip
    return json.dumps(doc, indent=2)
