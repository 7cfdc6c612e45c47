"""The doctor judges node locks by the thresholds file the alerts are generated from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from alerts import generate

from hami.core import thresholds
from hami.core.duration import parse_prometheus_duration
from hami.doctor import nodeprotocol
from hami.doctor.settings import LOCK_HELD_ALERT, Settings

NOW = datetime(2025, 6, 13, 9, 10, tzinfo=UTC)


def _locked(age: timedelta) -> dict[str, object]:
    value = (NOW - age).strftime("%Y-%m-%dT%H:%M:%SZ") + ",default,owner"
    return {"metadata": {"name": "n", "annotations": {"hami.io/mutex.lock": value}}}


def test_lock_held_threshold_is_the_alerts_for_duration() -> None:
    cfg = thresholds.load()
    (alert,) = [
        rule
        for group in generate.build(cfg)["groups"]
        for rule in group["rules"]
        if rule.get("alert") == "HAMiNodeLockHeldTooLong"
    ]
    assert alert["for"] == cfg["for"][LOCK_HELD_ALERT]
    assert Settings().lock_held_alert == parse_prometheus_duration(alert["for"])


def test_a_shorter_threshold_in_the_file_moves_the_doctors_verdict() -> None:
    node = _locked(timedelta(minutes=2))
    assert nodeprotocol.check_node_lock(node, True, Settings(), NOW)[0][0].code == "node.lock.held"
    strict = Settings(lock_held_alert=parse_prometheus_duration("1m"))
    (finding,) = nodeprotocol.check_node_lock(node, True, strict, NOW)[0]
    assert finding.code == "node.lock.stuck"
    assert "expires in 3m0s" in finding.summary
