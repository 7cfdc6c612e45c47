"""Run every panel query of the Grafana dashboards against a Prometheus, as Grafana would.

Variables are resolved the way Grafana resolves them: the datasource is the Prometheus itself, each
``label_values(metric, label)`` variable becomes the regex alternation of the values Prometheus has
(every value selected), ``$__rate_interval`` a caller-chosen window and ``$__range`` the dashboard's
time range (a caller-chosen duration).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

_LABEL_VALUES = re.compile(r"label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)")


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str  # file name
    panel: str
    expr: str
    instant: bool


def dashboard_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def panel_queries(path: Path) -> list[PanelQuery]:
    board = load(path)
    return [
        PanelQuery(path.name, panel["title"], target["expr"], bool(target.get("instant")))
        for panel in board["panels"]
        if panel["type"] != "row"
        for target in panel.get("targets", [])
    ]


def all_values(path: Path) -> dict[str, str]:
    """name -> allValue of each variable with "All": what Grafana interpolates when it has no values."""
    return {
        var["name"]: var["allValue"]
        for var in load(path)["templating"]["list"]
        if var.get("includeAll") and var.get("allValue")
    }


def variable_queries(path: Path) -> dict[str, tuple[str, str]]:
    """name -> (metric, label) of each ``label_values`` query variable of the dashboard."""
    out: dict[str, tuple[str, str]] = {}
    for var in load(path)["templating"]["list"]:
        if var["type"] != "query":
            continue
        query = var["query"] if isinstance(var["query"], str) else var["query"].get("query", "")
        m = _LABEL_VALUES.fullmatch(query.strip())
        if m is None:
            raise ValueError(f"{path.name}: variable {var['name']} has an unsupported query {query!r}")
        out[var["name"]] = (m.group(1), m.group(2))
    return out


class Prometheus:
    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: dict[str, str | list[str]]) -> Any:
        r = requests.get(self.url + path, params=params, timeout=self.timeout)
        body = r.json()
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def label_values(self, metric: str, label: str) -> list[str]:
        values: list[str] = self._get(f"/api/v1/label/{label}/values", {"match[]": [metric]})
        return sorted(values)

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self._get("/api/v1/query", {"query": expr})
        result: list[dict[str, Any]] = (
            data["result"] if data["resultType"] in ("vector", "matrix") else [data]
        )
        return result

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = self._get("/api/v1/alerts", {})["alerts"]
        return alerts


def _const(text: str) -> Callable[[re.Match[str]], str]:
    return lambda _m: text  # a function, so that backslashes in ``text`` are not template escapes


def substitute(expr: str, values: dict[str, list[str]], rate_interval: str, time_range: str = "1h") -> str:
    """Grafana's interpolation of one query: ``$var``/``${var}`` -> ``(v1|v2)`` (regex-escaped)."""
    expr = expr.replace("$__rate_interval", rate_interval).replace("$__range", time_range)
    for name, vals in values.items():
        alternation = "(" + "|".join(re.escape(v).replace("\\", "\\\\") for v in vals) + ")"
        expr = re.sub(r"\$\{" + name + r"\}|\$" + name + r"\b", _const(alternation), expr)
    if "$" in expr:
        raise ValueError(f"unresolved variable in {expr!r}")
    return expr


def run_all(prom: Prometheus, directory: Path, rate_interval: str) -> dict[PanelQuery, tuple[str, int]]:
    """Every panel query of every dashboard -> (interpolated expr, number of series returned).

    A variable whose ``label_values`` has no values counts as an empty result for every query using it.
    """
    out: dict[PanelQuery, tuple[str, int]] = {}
    for path in dashboard_files(directory):
        values = {name: prom.label_values(*mq) for name, mq in variable_queries(path).items()}
        fallback = all_values(path)
        for q in panel_queries(path):
            expr = q.expr
            for name in [n for n, v in values.items() if not v and n in fallback]:
                expr = re.sub(r"\$\{" + name + r"\}|\$" + name + r"\b", _const(fallback[name]), expr)
            used_empty = [n for n, v in values.items() if not v and re.search(r"\$\{?" + n + r"\b", expr)]
            if used_empty:
                out[q] = (f"variable ${used_empty[0]} has no values", 0)
                continue
            expr = substitute(expr, values, rate_interval)
            out[q] = (expr, len(prom.query(expr)))
    return out
