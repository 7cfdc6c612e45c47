"""The simulation as one self-contained HTML page: inline SVG charts, no script, no external file.

Three time series (GPU memory allocated, pods waiting, fragmentation) with one line per scenario,
then one small bar chart per headline figure, then the table of every figure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from html import escape

from hami.core.snapshot import model as snap
from hami.tune.simulate.measures import Fidelity, Summary
from hami.tune.simulate.records import Sample
from hami.tune.simulate.table import PEAK_ROW, ROWS, Outcome, cell, duration, fidelity_line, heading

PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d")
WIDTH, HEIGHT = 680, 230
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 28, 34

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1420px;
       color: #1d2329; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; }
.meta, .note { color: #5b6570; } .note { font-size: 13px; margin: 2px 0; }
.legend span { display: inline-block; margin-right: 18px; } .legend i { display: inline-block; width: 22px;
       height: 4px; margin-right: 6px; vertical-align: middle; border-radius: 2px; }
.charts { display: flex; flex-wrap: wrap; gap: 14px; }
.chart { border: 1px solid #e3e7eb; border-radius: 6px; background: #fff; }
.bars { display: flex; flex-wrap: wrap; gap: 10px; }
table { border-collapse: collapse; margin-top: 6px; }
td, th { padding: 4px 12px; text-align: right; border-bottom: 1px solid #edf0f2; white-space: nowrap; }
td:first-child, th:first-child { text-align: left; }
th { background: #f5f7f9; } .worse { color: #b42318; }
"""


def _x(t: float, start: float, end: float) -> float:
    span = (end - start) or 1.0
    return LEFT + (t - start) / span * (WIDTH - LEFT - RIGHT)


def _y(v: float, top: float) -> float:
    return HEIGHT - BOTTOM - (v / top if top else 0.0) * (HEIGHT - TOP - BOTTOM)


def _nice(top: float) -> float:
    """A round axis maximum at or above ``top``."""
    if top <= 0:
        return 1.0
    magnitude = 10.0 ** len(str(int(top))) / 10
    for step in (1, 2, 2.5, 5, 10):
        if step * magnitude >= top:
            return step * magnitude
    return top


def line_chart(
    title: str,
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    fmt: Callable[[float], str],
    span: tuple[float, float],
    top: float | None = None,
) -> str:
    start, end = span
    peak = max((v for _, pts in series for _, v in pts), default=0.0)
    axis_top = top if top is not None else _nice(peak)
    out = [
        f'<svg class="chart" role="img" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}">',
        f"<title>{escape(title)}</title>",
        f'<text x="{LEFT}" y="18" font-size="13" font-weight="600">{escape(title)}</text>',
    ]
    for i in range(5):
        v = axis_top * i / 4
        y = _y(v, axis_top)
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e8ebee"/>')
        out.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" fill="#5b6570">'
            f"{escape(fmt(v))}</text>"
        )
    for i in range(5):
        t = start + (end - start) * i / 4
        x = _x(t, start, end)
        label = datetime.fromtimestamp(t, UTC).strftime("%m-%d %H:%M")
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        out.append(
            f'<text x="{x:.1f}" y="{HEIGHT - 12}" font-size="11" text-anchor="{anchor}" fill="#5b6570">'
            f"{label}</text>"
        )
    for n, (name, pts) in enumerate(series):
        if not pts:
            continue
        d = " ".join(
            f"{'M' if i == 0 else 'L'}{_x(t, start, end):.1f},{_y(v, axis_top):.1f}"
            for i, (t, v) in enumerate(pts)
        )
        dash = ' stroke-dasharray="6 3"' if n % 2 and n > 1 else ""
        out.append(
            f'<path d="{d}" fill="none" stroke="{PALETTE[n % len(PALETTE)]}" stroke-width="2"{dash}>'
            f"<title>{escape(name)}</title></path>"
        )
    out.append("</svg>")
    return "".join(out)


def bar_chart(title: str, values: Sequence[tuple[str, float]], fmt: Callable[[float], str]) -> str:
    """One bar per scenario, named at its left."""
    width, names, top_pad, row = 440, 150, 28, 24
    height = top_pad + row * len(values) + 6
    peak = max((abs(v) for _, v in values), default=0.0) or 1.0
    span = width - names - 80
    out = [
        f'<svg class="chart" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f"<title>{escape(title)}</title>",
        f'<text x="8" y="18" font-size="13" font-weight="600">{escape(title)}</text>',
    ]
    for n, (name, v) in enumerate(values):
        y = top_pad + n * row
        w = max(abs(v) / peak * span, 1.0)
        short = name if len(name) <= 22 else name[:21] + "…"
        out.append(
            f'<text x="{names - 6}" y="{y + 12}" font-size="11" text-anchor="end" fill="#5b6570">'
            f"{escape(short)}</text>"
        )
        color = PALETTE[n % len(PALETTE)]
        out.append(
            f'<rect x="{names}" y="{y}" width="{w:.1f}" height="16" rx="2" fill="{color}">'
            f"<title>{escape(name)}: {escape(fmt(v))}</title></rect>"
        )
        out.append(f'<text x="{names + w + 6:.1f}" y="{y + 12}" font-size="11">{escape(fmt(v))}</text>')
    out.append("</svg>")
    return "".join(out)


def _series(
    outcomes: Sequence[Outcome], value: Callable[[Sample, Outcome], float]
) -> list[tuple[str, list[tuple[float, float]]]]:
    return [(o.summary.scenario, [(s.t, value(s, o)) for s in o.result.samples]) for o in outcomes]


def _pct(v: float) -> str:
    return f"{v:.0f}%"


def _legend(outcomes: Sequence[Outcome]) -> str:
    items = "".join(
        f'<span><i style="background:{PALETTE[n % len(PALETTE)]}"></i>{escape(o.summary.scenario)}</span>'
        for n, o in enumerate(outcomes)
    )
    return f'<p class="legend">{items}</p>'


def _bars(outcomes: Sequence[Outcome]) -> str:
    def figure(title: str, value: Callable[[Summary], float], fmt: Callable[[float], str]) -> str:
        return bar_chart(title, [(o.summary.scenario, value(o.summary)) for o in outcomes], fmt)

    charts = [
        figure("pods placed", lambda s: s.placed, lambda v: f"{v:.0f}"),
        figure("still waiting at the end", lambda s: s.pending_end, lambda v: f"{v:.0f}"),
        figure("wait p95", lambda s: s.wait_p95, duration),
        figure("GPU memory allocated, mean", lambda s: s.mem_mean * 100, _pct),
        figure("fragmentation, mean", lambda s: s.fragmentation_mean * 100, _pct),
        figure(
            "over-commit headroom, least card (GiB)", lambda s: s.headroom_mib / 1024, lambda v: f"{v:+.1f}"
        ),
    ]
    return f'<div class="bars">{"".join(charts)}</div>'


def _table(outcomes: Sequence[Outcome]) -> str:
    base = outcomes[0].summary
    rows = [*ROWS, PEAK_ROW] if base.peak_headroom_mib is not None else list(ROWS)
    head = "".join(f"<th>{escape(o.summary.scenario)}</th>" for o in outcomes)
    body = []
    for row in rows:
        cells = []
        for i, o in enumerate(outcomes):
            text = cell(row, o.summary, None if i == 0 else base)
            css = ' class="worse"' if text.endswith(" !)") else ""
            cells.append(f"<td{css}>{escape(text)}</td>")
        body.append(f"<tr><td>{escape(row.label.strip())}</td>{''.join(cells)}</tr>")
    return f"<table><tr><th></th>{head}</tr>{''.join(body)}</table>"


def to_html(snapshot: snap.Snapshot, path: str, outcomes: Sequence[Outcome], f: Fidelity) -> str:
    span = (snapshot.start, snapshot.taken)
    cap = {id(o): o.result.capacity for o in outcomes}
    memory = line_chart(
        "GPU memory allocated (% of registered)",
        _series(outcomes, lambda s, o: 100 * s.mem_mib / (cap[id(o)].mem_mib or 1)),
        _pct,
        span,
        100.0,
    )
    waiting = line_chart(
        "pods waiting", _series(outcomes, lambda s, o: s.pending), lambda v: f"{v:.0f}", span
    )
    frag = line_chart(
        "fragmentation (% of free memory no typical pod can use)",
        _series(outcomes, lambda s, o: 100 * s.stranded_mib / (s.free_mib or 1)),
        _pct,
        span,
        100.0,
    )
    notes = [*snapshot.notes, *(f"{o.summary.scenario}: {n}" for o in outcomes for n in o.result.notes)]
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>hami-tune simulate: {escape(path)}</title><style>{CSS}</style></head><body>",
        "<h1>What if the scheduler had run differently?</h1>",
        f'<p class="meta">{escape(heading(snapshot, path, outcomes[0].result.capacity.cards))}</p>',
        _legend(outcomes),
        f'<div class="charts">{memory}{waiting}{frag}</div>',
        "<h2>Headline figures</h2>",
        _bars(outcomes),
        "<h2>Every figure</h2>",
        _table(outcomes),
        f'<p class="note">{escape(fidelity_line(f))}</p>',
        *(f'<p class="note">note: {escape(n)}</p>' for n in notes),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
