"""The generated Grafana dashboards: up to date, templated, and every query valid PromQL over known names.

Section signs (§) refer to docs/guides/tuning.md.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from dashboards import generate

from hami.testing.prometheus import PROMTOOL

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
FILES = sorted(DASHBOARDS.glob("*.json"))
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
            "offset", "inf", "nan"}  # fmt: skip


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


def _queries() -> list[tuple[str, str, str]]:
    """(dashboard file, panel title, expr) of every panel query."""
    return [
        (path.name, panel["title"], target["expr"])
        for path in FILES
        for panel in _panels(_load(path))
        for target in panel["targets"]
    ]


def _substitute(expr: str) -> str:
    expr = expr.replace("$__rate_interval", "5m").replace("$__range", "1h")
    return re.sub(r"\$\{?(cluster|node|namespace|job)\}?", ".*", expr)


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers outside strings, selectors, ranges and label lists
    that are not functions or keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\b\d+(\.\d+)?(e[+-]?\d+)?\b", " ", text)
    names = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*(?!\s*\(|[A-Za-z0-9_:])", text))
    return {n for n in names if n.lower() not in KEYWORDS}


def _known_names() -> set[str]:
    listed = {
        line.strip()
        for line in (DASHBOARDS / "metric-names.txt").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    rules = yaml.safe_load((ROOT / "alerts" / "hami-rules.yaml").read_text(encoding="utf-8"))
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    return listed | recorded


def test_checked_in_dashboards_match_the_generator() -> None:
    rendered = generate.render_all()
    assert sorted(rendered) == [p.name for p in FILES], "dashboards/ holds exactly the generated JSON files"
    for name, text in rendered.items():
        assert (DASHBOARDS / name).read_text(encoding="utf-8") == text, f"{name} is stale: regenerate"
    assert generate.main(["--check"]) == 0


def test_dashboards_with_unique_uids_and_panel_ids() -> None:
    boards = [_load(p) for p in FILES]
    assert len(boards) == len(generate.BOARDS)
    assert len({b["uid"] for b in boards}) == len(boards)
    for board in boards:
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), board["uid"]
        assert all(i > 0 for i in ids)


def test_datasource_is_templated_everywhere() -> None:
    for path in FILES:
        board = _load(path)
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        for panel in _panels(board):
            assert panel["datasource"]["uid"] == "${datasource}", (path.name, panel["title"])
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}"


def test_node_and_namespace_variables_come_from_series_that_always_exist() -> None:
    expected = {
        "cluster": "label_values(hami_build_info, cluster)",
        "node": "label_values(hami_gpu_memory_limit_bytes, node)",
        "namespace": "label_values(hami_vgpu_memory_limit_bytes, namespace)",
        "job": "label_values(hami_scheduler_is_leader, job)",
    }
    seen = set()
    for path in FILES:
        for var in _load(path)["templating"]["list"]:
            if var["name"] in expected:
                assert var["query"] == expected[var["name"]]
                assert var["datasource"]["uid"] == "${datasource}"
                seen.add(var["name"])
    assert seen == set(expected)
    known = _known_names()
    for query in expected.values():
        assert re.match(r"label_values\((\w+),", query)[1] in known  # type: ignore[index]


def test_rates_use_rate_interval() -> None:
    for board, title, expr in _queries():
        for window in re.findall(r"\b(?:rate|increase|irate)\([^\[]*\[([^\]]+)\]", expr):
            assert window == "$__rate_interval", (board, title, expr)


def test_metric_name_extraction() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, result) (rate(x_bucket{job=~"$job", a="b{c}"}[5m])))'
        " / on (node) group_left () y:z:ratio > 1e3 and vector(1)"
    )
    assert metric_names(expr) == {"x_bucket", "y:z:ratio"}


def test_every_query_uses_known_metric_names() -> None:
    known = _known_names()
    for board, title, expr in _queries():
        unknown = metric_names(expr) - known
        assert not unknown, f"{board} / {title}: unknown metrics {unknown} in {expr}"


@pytest.mark.skipif(not Path(PROMTOOL).exists(), reason="promtool is not installed")
def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    queries = _queries()
    rules = {
        "groups": [
            {
                "name": "dashboard-queries",
                "rules": [
                    {"record": f"dashboard:query_{i}:check", "expr": _substitute(q[2])}
                    for i, q in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    out = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(queries)} rules found" in out.stdout


def test_tuning_dashboard_draws_the_guides_thresholds() -> None:
    board = _load(DASHBOARDS / "hami-tuning.json")
    drawn: dict[str, set[float]] = {}
    for panel in _panels(board):
        steps = panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
        drawn[panel["title"]] = {s["value"] for s in steps if s["value"] is not None}
        if drawn[panel["title"]]:
            assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "dashed"
    assert {1.0, 1.5, 2.0} <= drawn["Safe over-commit ratio vs current scaling"]  # §3.1 table
    assert {5, 10, 20, 30, 50} <= drawn["Configured split count"]  # §4.2/§4.3
    assert {2 * 1024**3, 8 * 1024**3, 16 * 1024**3} <= drawn["Smallest vGPU memory request"]  # §4.3
    assert {5, 20, 50, 100} <= drawn["Configured QPS and burst"]  # §2.1
    assert {50, 200} <= drawn["Nodes (tier boundaries at 50 and 200)"]
    assert {120, 180, 300, 480, 600} <= drawn["3 x p99 bind latency vs expiry choices"]  # §2.2, §6.1


def test_every_panel_has_a_description_and_every_query_follows_the_cluster() -> None:
    for path in FILES:
        board = _load(path)
        assert [v["name"] for v in board["templating"]["list"]][:2] == ["datasource", "cluster"]
        for panel in _panels(board):
            assert panel.get("description"), (path.name, panel["title"])
    for board, title, expr in _queries():
        selectors = len(re.findall(r"\{", expr))
        assert selectors and expr.count('cluster=~"$cluster"') == selectors, (board, title, expr)


def test_every_dashboard_marks_firing_hami_alerts() -> None:
    for path in FILES:
        (annotation,) = [a for a in _load(path)["annotations"]["list"] if a.get("name") == "HAMi alerts"]
        assert annotation["expr"] == 'ALERTS{cluster=~"$cluster", alertstate="firing", alertname=~"HAMi.*"}'
    overview = _load(DASHBOARDS / "hami-cluster-overview.json")
    titles = [p["title"] for p in _panels(overview)]
    assert "Firing HAMi alerts" in titles
    assert {"vGPU memory allocated by namespace", "Pending GPU pods by namespace and reason"} <= set(titles)


def test_cluster_matcher_reaches_every_selector() -> None:
    from dashboards.panels import with_cluster

    got = with_cluster('sum by (le) (rate(x_bucket{a="b}"}[5m])) / on (n) group_left () y:z:r > 1e3')
    assert got == (
        'sum by (le) (rate(x_bucket{cluster=~"$cluster", a="b}"}[5m])) / on (n) group_left () '
        'y:z:r{cluster=~"$cluster"} > 1e3'
    )
