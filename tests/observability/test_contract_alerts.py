"""HAMi's proposed default alerts (alerts/contract.py): shipped under HAMi's names with HAMi's
thresholds, durations and severities, and never notifying beside the one of ours that says the same:
Debian's Alertmanager, loaded with alerts/alertmanager.yaml, is sent both alerts of each pair as
Prometheus would label them, and must hold exactly one back."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from alerts.contract import OPTIONAL_GROUP

from hami.demo import monitoring
from hami.testing.processes import ProcessGroup, free_port, http_ok
from hami.testing.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "hami-rules.yaml"
OPTIONAL = ROOT / "alerts" / "hami-rules-optional.yaml"

# HAMi's proposal: name -> (threshold in the expression, for, severity).
CONTRACT = {
    "HAMiGPUMemoryNearlyExhausted": ("> 90", "10m", "warning"),
    "HAMiGPUCoresNearlyExhausted": ("> 90", "10m", "warning"),
    "HAMivGPUMemoryNearLimit": ("> 95", "5m", "warning"),
    "HAMiSchedulerMetricsAbsent": ("absent(", "15m", "critical"),
}


def _groups() -> dict[str, list[dict[str, Any]]]:
    """Every group of the rules file and of the optional one (the alerts off by default)."""
    files = [yaml.safe_load(path.read_text(encoding="utf-8")) for path in (RULES, OPTIONAL)]
    groups = [g for data in files for g in data["groups"]]
    return {g["name"]: g["rules"] for g in groups}


def test_the_contract_names_ship_with_hamis_thresholds() -> None:
    alerts = {r["alert"]: r for rules in _groups().values() for r in rules if "alert" in r}
    for name, (threshold, for_, severity) in CONTRACT.items():
        rule = alerts[name]
        assert threshold in rule["expr"] and rule["for"] == for_ and rule["labels"]["severity"] == severity
    assert "vgpu_memory_limit_bytes" in alerts["HAMivGPUMemoryNearLimit"]["expr"] or (
        "hami_vgpu_memory_used_per_limit" in alerts["HAMivGPUMemoryNearLimit"]["expr"]
    )
    # Off by default: alone in the optional file's group, which the chart renders only with
    # prometheusRule.optionalAlerts and the mixin with _config.optionalAlerts.
    assert [r["alert"] for r in _groups()[OPTIONAL_GROUP]] == ["HAMiSchedulerMetricsAbsent"]
    shipped = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    assert OPTIONAL_GROUP not in {g["name"] for g in shipped}


CONTAINER = {
    "job": "hami-monitor", "instance": "n1:9394", "node": "n1", "namespace": "ns1", "pod": "p1",
    "container": "c1", "vdevice_index": "0", "device_uuid": "GPU-a",
}  # fmt: skip
# (the alert that notifies, the one it holds back), each with the labels its rule gives it.
PAIRS = [
    (("HAMiGPUMemoryNearlyExhausted", {"node": "n1"}), ("HAMiGPUMemoryAllocationHigh", {"node": "n1"})),
    (
        ("HAMiGPUCoresNearlyExhausted", {"node": "n1", "device_uuid": "GPU-a"}),
        ("HAMiGPUCoreAllocationHigh", {"node": "n1"}),
    ),
    (("HAMiGPUMemoryHigh", CONTAINER), ("HAMivGPUMemoryNearLimit", CONTAINER)),
    (("HAMiVGPUMemoryOverLimit", CONTAINER), ("HAMivGPUMemoryNearLimit", CONTAINER)),
    (
        ("HAMiSchedulerDown", {"job": "hami-scheduler"}),
        ("HAMiSchedulerMetricsAbsent", {"job": "hami-scheduler"}),
    ),
]


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    if shutil.which(monitoring.ALERTMANAGER) is None:
        pytest.skip("prometheus-alertmanager is not installed (make sysdeps)")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    procs = ProcessGroup(tmp_path / "logs")
    # Notifications go to a closed port: what is tested is what Alertmanager holds back.
    sink = f"http://127.0.0.1:{free_port()}/"
    argv = monitoring.alertmanager_argv(tmp_path, f"127.0.0.1:{port}", url, sink, True)
    procs.start("alertmanager", argv)
    try:
        wait_until(http_ok(url + "/-/ready"), 60, "Alertmanager", alive=procs.check_alive)
        yield url
    finally:
        procs.stop()


def _post(url: str, alerts: list[tuple[str, dict[str, str]]]) -> None:
    now = datetime.now(UTC)
    body = [
        {
            "labels": {"alertname": name, "severity": "warning", **labels},
            "startsAt": (now - timedelta(minutes=1)).isoformat(),
            "endsAt": (now + timedelta(hours=1)).isoformat(),
        }
        for name, labels in alerts
    ]
    requests.post(url + "/api/v2/alerts", json=body, timeout=10).raise_for_status()


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=[f"{s[0]}>{t[0]}" for s, t in PAIRS])
def test_alertmanager_notifies_one_of_each_pair(
    alertmanager: str, source: tuple[str, dict[str, str]], target: tuple[str, dict[str, str]]
) -> None:
    _post(alertmanager, [source, target])

    def state(name: str, labels: dict[str, str]) -> dict[str, Any]:
        got = requests.get(alertmanager + "/api/v2/alerts", timeout=10).json()
        want = {"alertname": name, "severity": "warning", **labels}
        return next((a["status"] for a in got if a["labels"] == want), {})

    wait_until(lambda: state(*target).get("state") == "suppressed", 30, f"{target[0]} held back")
    assert state(*source)["state"] == "active" and state(*target)["inhibitedBy"]
    # The inhibition is per object: the same alert about another node or pod is not held back.
    other = {k: {"node": "n2", "pod": "p2"}.get(k, v) for k, v in target[1].items()}
    if other != target[1]:
        _post(alertmanager, [(target[0], other)])
        wait_until(lambda: state(target[0], other).get("state") == "active", 30, f"{target[0]} elsewhere")
