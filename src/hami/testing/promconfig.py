"""Configuration files for the demo's Prometheus and Alertmanager, and a fast copy of the rules.

The scrape job names are the ones alerts/config.yaml gives the rules (`hami-monitor`, `hami-scheduler`,
`hami-device-plugin`), plus `kube-state-metrics` for the seed's per-pod pending alert.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from hami.core.duration import parse_prometheus_duration

JOB_MONITOR = "hami-monitor"
JOB_SCHEDULER = "hami-scheduler"
JOB_DEVICE_PLUGIN = "hami-device-plugin"
JOB_KSM = "kube-state-metrics"


def prometheus_config(
    targets: Mapping[str, str],
    rule_files: list[Path],
    alertmanager: str | None,
    scrape_interval: str = "15s",
    evaluation_interval: str = "15s",
) -> str:
    """prometheus.yml scraping ``targets`` (job name -> host:port) with the rules and Alertmanager."""
    cfg: dict[str, Any] = {
        "global": {
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval if seconds(scrape_interval) < 10 else "10s",
            "evaluation_interval": evaluation_interval,
            "external_labels": {"cluster": "hami-demo"},
        },
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [target]}]} for job, target in targets.items()
        ],
    }
    if alertmanager is not None:
        cfg["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    return yaml.safe_dump(cfg, sort_keys=False)


def alertmanager_config(group_wait: str = "10s", group_interval: str = "30s") -> str:
    """One catch-all route to a receiver with no integrations: alerts are kept and shown, sent nowhere."""
    cfg = {
        "route": {
            "receiver": "hami-demo",
            "group_by": ["alertname", "node"],
            "group_wait": group_wait,
            "group_interval": group_interval,
            "repeat_interval": "4h",
        },
        "receivers": [{"name": "hami-demo"}],
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def fast_rules(rules_text: str, factor: float = 1 / 60) -> str:
    """The rules with every alert's ``for:`` multiplied by ``factor`` (default: minutes become seconds),
    so that a test sees alerts fire within seconds while a transient shorter than the scaled ``for:``
    still does not fire; expressions, thresholds and labels are unchanged."""
    data: dict[str, Any] = yaml.safe_load(rules_text)
    for group in data["groups"]:
        for rule in group["rules"]:
            if "alert" in rule and "for" in rule:
                rule["for"] = f"{round(seconds(rule['for']) * factor * 1000)}ms"
    return yaml.safe_dump(data, sort_keys=False, width=1000)


def seconds(duration: str) -> float:
    """A Prometheus duration (``1h30m``, ``5m``, ``250ms``) in seconds."""
    return parse_prometheus_duration(duration).total_seconds()
