"""Small builders over grafana-foundation-sdk shared by the hami dashboards."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.models import common as common_m
from grafana_foundation_sdk.models import dashboard as dash_m
from grafana_foundation_sdk.models import prometheus as prom_m

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


@dataclass(frozen=True)
class Q:
    """One panel query: PromQL and its legend."""

    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Line:
    """A threshold drawn on a panel: from `value` up, in `color`."""

    value: float
    color: str


def _targets(queries: Sequence[Q]) -> Iterator[prometheus.Dataquery]:
    for ref, q in zip("ABCDEFGH", queries, strict=False):
        t = prometheus.Dataquery().expr(q.expr).ref_id(ref).datasource(DATASOURCE)
        if q.legend:
            t = t.legend_format(q.legend)
        yield t.instant() if q.instant else t.range()


def _thresholds(lines: Sequence[Line], base: str = "green") -> dash_b.ThresholdsConfig:
    steps = [dash_m.Threshold(value=None, color=base)]
    steps += [dash_m.Threshold(value=line.value, color=line.color) for line in lines]
    return dash_b.ThresholdsConfig().mode(dash_m.ThresholdsMode.ABSOLUTE).steps(steps)


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
            .description(description)
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
            .description(description)
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
            .description(description)
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
    "node": lambda: _query_var("node", "Node", "label_values(hami_gpu_memory_limit_bytes, node)"),
    "namespace": lambda: _query_var(
        "namespace", "Namespace", "label_values(hami_vgpu_memory_limit_bytes, namespace)"
    ),
    "job": lambda: _query_var("job", "Scheduler job", "label_values(hami_scheduler_is_leader, job)"),
}
