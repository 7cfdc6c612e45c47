"""Small builders over grafana-foundation-sdk shared by the hami dashboards."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.models import common as common_m
from grafana_foundation_sdk.models import dashboard as dash_m
from grafana_foundation_sdk.models import prometheus as prom_m

from dashboards.descriptions import DESCRIPTIONS
from hami.core import thresholds

DATASOURCE = dash_m.DataSourceRef(type_val="prometheus", uid="${datasource}")
NODE = 'node=~"$node"'
NAMESPACE = 'namespace=~"$namespace"'
JOB = 'job=~"$job"'
RI = "$__rate_interval"


def alert_thresholds() -> dict[str, Any]:
    """The alert thresholds, so panels draw the lines the alerts fire at."""
    data: dict[str, Any] = thresholds.load()["thresholds"]
    return data


CLUSTER_LABEL: str = thresholds.load()["cluster_label"]
CLUSTER = f'{CLUSTER_LABEL}=~"$cluster"'
# HAMi's alerts while they fire, as Prometheus exposes them: the annotations and the alerts panel.
FIRING = 'ALERTS{alertstate="firing", alertname=~"HAMi.*"}'
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
             "group_right", "inf", "nan"}  # fmt: skip
_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                 "bottomk", "topk", "quantile"}  # fmt: skip
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def with_cluster(expr: str) -> str:
    """``expr`` with the cluster matcher added to every vector selector, so every query of every
    dashboard follows the cluster variable (strings, label lists, ranges and functions untouched)."""
    out: list[str] = []
    i, n = 0, len(expr)
    while i < n:
        ch = expr[i]
        if ch in "\"'":
            end = i + 1
            while end < n and expr[end] != ch:
                end += 2 if expr[end] == "\\" else 1
            out.append(expr[i : end + 1])
            i = end + 1
            continue
        if ch == "[":
            end = expr.index("]", i)
            out.append(expr[i : end + 1])
            i = end + 1
            continue
        m = _IDENT.match(expr, i)
        if m is None or (i > 0 and (expr[i - 1].isalnum() or expr[i - 1] in "_.")):
            out.append(ch)
            i += 1
            continue
        word, j = m.group(), m.end()
        k = j
        while k < n and expr[k] == " ":
            k += 1
        if word.lower() in _LISTS and k < n and expr[k] == "(":
            end = expr.index(")", k)
            out.append(expr[i : end + 1])
            i = end + 1
        elif word.lower() in _KEYWORDS or word in _AGGREGATIONS or (k < n and expr[k] == "("):
            out.append(word)
            i = j
        elif k < n and expr[k] == "{":
            close = _closing_brace(expr, k)
            inner = expr[k + 1 : close].strip()
            out.append(f"{word}{{{CLUSTER}" + (f", {inner}" if inner else "") + "}")
            i = close + 1
        else:
            out.append(f"{word}{{{CLUSTER}}}")
            i = j
    return "".join(out)


def _closing_brace(expr: str, start: int) -> int:
    """Index of the ``}`` closing the matcher list opened at ``start`` (braces in strings skipped)."""
    i = start + 1
    while expr[i] != "}":
        if expr[i] in "\"'":
            quote, i = expr[i], i + 1
            while expr[i] != quote:
                i += 2 if expr[i] == "\\" else 1
        i += 1
    return i


@dataclass(frozen=True)
class Q:
    """One panel query: PromQL and its legend."""

    expr: str
    legend: str = ""
    instant: bool = False
    # Show the series' exemplars: the trace ID of a sampled observation, which leads from a slow
    # bucket to that pod's trace (docs/design/tracing.md).
    exemplar: bool = False


@dataclass(frozen=True)
class Line:
    """A threshold drawn on a panel: from `value` up, in `color`."""

    value: float
    color: str


def _targets(queries: Sequence[Q]) -> Iterator[prometheus.Dataquery]:
    for ref, q in zip("ABCDEFGH", queries, strict=False):
        t = prometheus.Dataquery().expr(with_cluster(q.expr)).ref_id(ref).datasource(DATASOURCE)
        if q.legend:
            t = t.legend_format(q.legend)
        if q.exemplar:
            t = t.exemplar(True)
        yield t.instant() if q.instant else t.range()


def _thresholds(lines: Sequence[Line], base: str = "green") -> dash_b.ThresholdsConfig:
    steps = [dash_m.Threshold(value=None, color=base)]
    steps += [dash_m.Threshold(value=line.value, color=line.color) for line in lines]
    return dash_b.ThresholdsConfig().mode(dash_m.ThresholdsMode.ABSOLUTE).steps(steps)


def _described(title: str, description: str) -> str:
    text = description or DESCRIPTIONS.get(title, "")
    if not text:
        raise ValueError(f"panel {title!r} has no description: add one (dashboards/descriptions.py)")
    return text


class Board:
    """Accumulates rows and panels with stable ids and a left-to-right grid."""

    def __init__(self, uid: str, title: str, description: str, variables: Sequence[str]) -> None:
        self._ids = itertools.count(1)
        self.builder = (
            dash_b.Dashboard(title)
            .uid(uid)
            .description(description)
            .tags(["hami", "gpu"])
            .editable()
            .refresh("30s")
            .time("now-6h", "now")
            .timezone("browser")
            .tooltip(dash_m.DashboardCursorSync.CROSSHAIR)
            .link(
                dash_b.DashboardLink("HAMi dashboards")
                .type(dash_m.DashboardLinkType.DASHBOARDS)
                .tags(["hami"])
                .as_dropdown(True)
                .include_vars(True)
                .keep_time(True)
            )
            .with_variable(dash_b.DatasourceVariable("datasource").label("Data source").type("prometheus"))
            .with_variable(VARIABLES["cluster"]())
            .annotation(
                dash_b.AnnotationQuery()
                .name("HAMi alerts")
                .datasource(DATASOURCE)
                .enable(True)
                .icon_color("red")
                .expr(with_cluster(FIRING))
            )
        )
        for name in variables:
            self.builder = self.builder.with_variable(VARIABLES[name]())

    def row(self, title: str) -> None:
        self.builder = self.builder.with_row(dash_b.Row(title).id(next(self._ids)))

    def timeseries(
        self,
        title: str,
        unit: str,
        queries: Sequence[Q],
        description: str = "",
        *,
        lines: Sequence[Line] = (),
        width: int = 12,
        stack: bool = False,
        minimum: float | None = None,
    ) -> None:
        p = (
            timeseries.Panel()
            .id(next(self._ids))
            .title(title)
            .description(_described(title, description))
            .datasource(DATASOURCE)
            .unit(unit)
            .span(width)
            .height(8)
            .line_width(1)
            .fill_opacity(10)
            .legend(
                common_b.VizLegendOptions()
                .display_mode(common_m.LegendDisplayMode.TABLE)
                .placement(common_m.LegendPlacement.BOTTOM)
                .show_legend(True)
                .calcs(["lastNotNull", "max"])
            )
            .tooltip(common_b.VizTooltipOptions().mode(common_m.TooltipDisplayMode.MULTI))
        )
        if minimum is not None:
            p = p.min(minimum)
        if stack:
            p = p.stacking(common_b.StackingConfig().mode(common_m.StackingMode.NORMAL))
        if lines:
            p = p.thresholds(_thresholds(lines)).thresholds_style(
                common_b.GraphThresholdsStyleConfig().mode(common_m.GraphTresholdsStyleMode.DASHED)
            )
        for t in _targets(queries):
            p = p.with_target(t)
        self.builder = self.builder.with_panel(p)

    def stat(
        self,
        title: str,
        unit: str,
        query: Q,
        description: str = "",
        *,
        lines: Sequence[Line] = (),
        width: int = 4,
    ) -> None:
        p = (
            stat.Panel()
            .id(next(self._ids))
            .title(title)
            .description(_described(title, description))
            .datasource(DATASOURCE)
            .unit(unit)
            .span(width)
            .height(4)
            .color_mode(common_m.BigValueColorMode.VALUE)
            .graph_mode(common_m.BigValueGraphMode.AREA)
            .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]))
            .thresholds(_thresholds(lines))
        )
        for t in _targets([query]):
            p = p.with_target(t)
        self.builder = self.builder.with_panel(p)

    def table(self, title: str, unit: str, query: Q, description: str = "", width: int = 24) -> None:
        p = (
            table.Panel()
            .id(next(self._ids))
            .title(title)
            .description(_described(title, description))
            .datasource(DATASOURCE)
            .unit(unit)
            .span(width)
            .height(8)
        )
        for t in _targets([query]):
            p = p.with_target(t.format(prom_m.PromQueryFormat.TABLE))
        self.builder = self.builder.with_panel(p)


def _query_var(name: str, label: str, query: str) -> dash_b.QueryVariable:
    return (
        dash_b.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(dash_m.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dash_m.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(dash_m.VariableOption(selected=True, text="All", value="$__all"))
    )


# Variables come from series present whenever the component runs: every registered GPU has
# hami_gpu_memory_limit_bytes, every running vGPU container hami_vgpu_memory_limit_bytes, and the
# scheduler always exports hami_scheduler_is_leader.
VARIABLES = {
    "cluster": lambda: _query_var("cluster", "Cluster", f"label_values(hami_build_info, {CLUSTER_LABEL})"),
    "node": lambda: _query_var("node", "Node", "label_values(hami_gpu_memory_limit_bytes, node)"),
    "namespace": lambda: _query_var(
        "namespace", "Namespace", "label_values(hami_vgpu_memory_limit_bytes, namespace)"
    ),
    "job": lambda: _query_var("job", "Scheduler job", "label_values(hami_scheduler_is_leader, job)"),
}
