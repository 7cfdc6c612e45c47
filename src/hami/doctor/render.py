"""Text and JSON renderings of a report (a list of sections)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from hami.doctor.findings import BROKEN, Finding, Section, Severity, Table, exit_code, worst

_TAG = {"ok": "[ok]     ", "info": "[info]   ", "warning": "[warning]", "broken": "[BROKEN] "}
_INDENT = " " * 10


def status(sections: list[Section]) -> Severity:
    return worst(s.severity for s in sections)


def _finding(f: Finding) -> list[str]:
    lines = [f"{_TAG[f.severity]} {f.summary}  ({f.code})"]
    lines += [f"{_INDENT}- {e}" for e in f.evidence]
    if f.fix and f.severity != "ok":
        lines.append(f"{_INDENT}fix: {f.fix}")
    if f.remedy is not None:
        lines.append(f"{_INDENT}--fix: {f.remedy.description}")
    return lines


def _table(t: Table) -> list[str]:
    widths = [
        max(len(h), *(len(r[i]) for r in t.rows)) if t.rows else len(h) for i, h in enumerate(t.headers)
    ]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [
        f"  {t.title}:",
        "  " + fmt.format(*t.headers).rstrip(),
        *("  " + fmt.format(*row).rstrip() for row in t.rows),
    ]


def to_text(command: str, at: str, sections: list[Section]) -> str:
    lines = [f"hami-doctor {command}  (at {at})", ""]
    for section in sections:
        lines.append(f"== {section.title}: {section.severity} ==")
        for f in section.findings:
            lines += _finding(f)
        for t in section.tables:
            lines.append("")
            lines += _table(t)
        lines.append("")
    overall = status(sections)
    diagnosis = next((f.summary for s in sections for f in s.findings if f.severity == BROKEN), "")
    lines.append(
        f"status: {overall} (exit {exit_code(overall)})" + (f"; diagnosis: {diagnosis}" if diagnosis else "")
    )
    return "\n".join(lines) + "\n"


def to_json(command: str, at: str, sections: list[Section], applied: list[str] | None = None) -> str:
    overall = status(sections)
    doc: dict[str, Any] = {
        "command": command,
        "at": at,
        "status": overall,
        "exit_code": exit_code(overall),
        "sections": [
            {
                "title": s.title,
                "status": s.severity,
                "findings": [asdict(f) for f in s.findings],
                "tables": [
                    {"title": t.title, "headers": list(t.headers), "rows": [list(r) for r in t.rows]}
                    for t in s.tables
                ],
            }
            for s in sections
        ],
    }
    if applied is not None:
        doc["fixed"] = applied
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
