"""The generated Prometheus rules: up to date, valid for promtool, conventional, and unit-tested."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from alerts import generate

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "hami-rules.yaml"
OPTIONAL = ROOT / "alerts" / "hami-rules-optional.yaml"
RULE_TESTS = sorted((ROOT / "alerts" / "tests").glob("*.test.yaml"))
RUNBOOKS = ROOT / "docs" / "runbooks"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

needs_promtool = pytest.mark.skipif(not Path(PROMTOOL).exists(), reason="promtool is not installed")


def _rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in data["groups"] for rule in group["rules"]]


def _alerts() -> list[dict[str, Any]]:
    return [r for r in _rules() if "alert" in r]


def _records() -> list[dict[str, Any]]:
    return [r for r in _rules() if "record" in r]


def test_checked_in_rules_match_the_generator() -> None:
    assert RULES.read_text(encoding="utf-8") == generate.render(generate.load_config()), (
        "alerts/hami-rules.yaml is stale: run python -m alerts.generate"
    )


def test_alerts_off_by_default_are_in_a_file_of_their_own() -> None:
    """HAMi's proposal ships HAMiSchedulerMetricsAbsent off: not in the rules file everyone loads, but in
    alerts/hami-rules-optional.yaml, which turns it on when loaded beside it."""
    assert OPTIONAL.read_text(encoding="utf-8") == generate.render_optional(generate.load_config())
    assert "HAMiSchedulerMetricsAbsent" not in {r["alert"] for r in _alerts()}
    optional = yaml.safe_load(OPTIONAL.read_text(encoding="utf-8"))["groups"]
    assert [r["alert"] for g in optional for r in g["rules"]] == ["HAMiSchedulerMetricsAbsent"]


@needs_promtool
def test_promtool_check_optional_rules() -> None:
    out = subprocess.run(
        [PROMTOOL, "check", "rules", str(OPTIONAL)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0 and "SUCCESS: 1 rules found" in out.stdout, out.stdout + out.stderr


def test_generator_check_mode_detects_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "rules.yaml"
    stale.write_text(RULES.read_text(encoding="utf-8").replace("0.9", "0.8"), encoding="utf-8")
    monkeypatch.setattr(generate, "OUTPUT", stale)
    assert generate.main(["--check"]) == 1
    monkeypatch.setattr(generate, "OUTPUT", RULES)
    assert generate.main(["--check"]) == 0


def test_thresholds_come_from_the_config() -> None:
    cfg = generate.load_config()
    cfg["thresholds"]["vgpu_memory_used_ratio"] = 0.75
    cfg["jobs"]["scheduler"] = "my-scheduler"
    text = generate.render(cfg)
    assert "> 0.75" in text
    assert 'absent(up{job="my-scheduler"})' in text
    assert 'job="hami-scheduler"' not in text


@needs_promtool
def test_promtool_check_rules() -> None:
    out = subprocess.run(
        [PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in out.stdout


@needs_promtool
@pytest.mark.parametrize("test_file", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_test_rules(test_file: Path) -> None:
    out = subprocess.run(
        [PROMTOOL, "test", "rules", test_file.name],
        cwd=test_file.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: a["alert"])
def test_alert_follows_mixin_conventions(alert: dict[str, Any]) -> None:
    name = alert["alert"]
    # HAMi's proposed HAMivGPUMemoryNearLimit keeps HAMi's lower-case v (alerts/contract.py).
    assert re.fullmatch(r"HAMi[A-Z][A-Za-z0-9]+", name) or name == "HAMivGPUMemoryNearLimit"
    assert alert["labels"]["severity"] in ("critical", "warning", "info")
    assert re.fullmatch(r"\d+[smh]", alert["for"]), "every alert has a for: duration"
    ann = alert["annotations"]
    assert "{{" not in ann["summary"], "summary is static"
    assert "{{" in ann["description"], "description is templated"
    assert ann["runbook_url"].endswith(f"/docs/runbooks/{name}.md")
    runbook = RUNBOOKS / f"{name}.md"
    assert runbook.is_file(), f"missing runbook {runbook}"
    text = runbook.read_text(encoding="utf-8")
    for section in ("**Symptom.**", "**Confirm.**", "**Fix"):
        assert section in text, f"{runbook.name} lacks {section}"
    assert "```promql" in text


# level:metric:operations, or level:metric where the metric is a quantity the rules define (no operation
# applies) and its name ends in its unit or _ratio.
RECORD_NAME = re.compile(
    r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+|[a-z_]+:[a-z0-9_]+_(?:ratio|bytes|seconds|percent|celsius|total)"
)


def test_recording_rules_follow_level_metric_operations() -> None:
    for rule in _records():
        assert RECORD_NAME.fullmatch(rule["record"]), rule["record"]
    assert RECORD_NAME.fullmatch("gpu_model:hami_fragmentation_ratio")
    for bad in ("gpu_model:hami_fragmentation", "hami_fragmentation_ratio", "node:hami_gpu_memory:"):
        assert not RECORD_NAME.fullmatch(bad), bad


def _unit_tests() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for path in RULE_TESTS:
        cases.extend(yaml.safe_load(path.read_text(encoding="utf-8"))["tests"])
    return cases


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    fires: set[str] = set()
    silent: set[str] = set()
    for case in _unit_tests():
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {a["alert"] for a in _alerts()}
    assert names - fires == set(), "alerts without a firing test"
    assert names - silent == set(), "alerts without a not-firing test"


def test_every_recording_rule_is_tested() -> None:
    tested = {
        check["expr"].split("{")[0] for case in _unit_tests() for check in case.get("promql_expr_test", [])
    }
    assert {r["record"] for r in _records()} - tested == set()


def test_pending_alert_joins_on_namespace_and_pod() -> None:
    (pending,) = [a for a in _alerts() if a["alert"] == "HAMiGPUPodPending"]
    assert "on (namespace, pod)" in pending["expr"]
    assert "on(pod)" not in pending["expr"].replace(" ", "")
