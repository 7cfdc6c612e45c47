"""mixin/: rendered by jsonnet, the default configuration gives exactly the generated rules and
dashboards; a changed _config flows into every rule that uses it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import _jsonnet
import yaml
from scripts import gen_mixin

ROOT = Path(__file__).resolve().parents[2]
MIXIN = ROOT / "mixin"


def render(overrides: str = "{}") -> dict[str, Any]:
    snippet = (
        f"local m = (import 'mixin.libsonnet') + {{ _config+:: {overrides} }};"
        "{ rules: m.prometheusRules, alerts: m.prometheusAlerts, dashboards: m.grafanaDashboards }"
    )
    out: dict[str, Any] = json.loads(_jsonnet.evaluate_snippet("test", snippet, jpathdir=[str(MIXIN)]))
    return out


def test_checked_in_mixin_matches_the_generator() -> None:
    assert gen_mixin.main(["--check"]) == 0


def test_default_config_renders_exactly_the_generated_files() -> None:
    out = render()
    rules = yaml.safe_load((ROOT / "alerts" / "hami-rules.yaml").read_text(encoding="utf-8"))
    assert out["rules"]["groups"] + out["alerts"]["groups"] == rules["groups"]
    files = sorted((ROOT / "dashboards").glob("*.json"))
    assert sorted(out["dashboards"]) == [p.name for p in files]
    for path in files:
        assert out["dashboards"][path.name] == json.loads(path.read_text(encoding="utf-8")), path.name


def test_optional_alerts_are_off_by_default_and_on_with_the_flag() -> None:
    """HAMiSchedulerMetricsAbsent, off by default as HAMi proposes: _config.optionalAlerts adds
    alerts/hami-rules-optional.yaml's group."""
    optional = yaml.safe_load((ROOT / "alerts" / "hami-rules-optional.yaml").read_text(encoding="utf-8"))
    off = render()["alerts"]["groups"]
    assert "HAMiSchedulerMetricsAbsent" not in {r["alert"] for g in off for r in g["rules"]}
    assert render("{ optionalAlerts: true }")["alerts"]["groups"] == off + optional["groups"]


def test_config_overrides_reach_the_rules_and_dashboards() -> None:
    out = render(
        "{ schedulerJob: 'my-scheduler', nodeLockHeldFor: '7m', vgpuMemoryUsedRatio: '0.75',"
        " runbookURLPattern: 'https://runbooks.example/%s', clusterLabel: 'k8s_cluster' }"
    )
    alerts = {r["alert"]: r for g in out["alerts"]["groups"] for r in g["rules"]}
    assert alerts["HAMiNodeLockHeldTooLong"]["for"] == "7m"
    assert 'job="my-scheduler"' in alerts["HAMiNodeLockHeldTooLong"]["expr"]
    assert "> 0.75" in alerts["HAMiGPUMemoryHigh"]["expr"]
    assert "more than 7m" in alerts["HAMiNodeLockHeldTooLong"]["annotations"]["description"]
    assert alerts["HAMiVGPUIdle"]["annotations"]["runbook_url"] == "https://runbooks.example/HAMiVGPUIdle"
    text = json.dumps(out["dashboards"])
    assert 'k8s_cluster=~\\"$cluster\\"' in text and not re.search(r'\bcluster=~\\"', text)
    assert "label_values(hami_build_info, k8s_cluster)" in text
    exprs = [r["expr"] for g in out["rules"]["groups"] + out["alerts"]["groups"] for r in g["rules"]]
    assert not [e for e in exprs if 'job="hami-scheduler"' in e]
