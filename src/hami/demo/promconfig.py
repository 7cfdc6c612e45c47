"""Configuration files for the demo's Prometheus and Alertmanager, and a fast copy of the rules.

The scrape job names are the ones the thresholds file gives the rules (`hami-monitor`,
`hami-scheduler`, `hami-device-plugin`), plus `kube-state-metrics` for the per-pod pending alert.
Prometheus carries the demo's `cluster` as an external label (alerts and federation see it; local
queries do not, so the dashboards' cluster variable is "All"). Alertmanager runs the shipped
alerts/alertmanager.yaml (its grouping and inhibitions) with the receiver pointed at the demo's file
sink.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from hami.core.duration import parse_prometheus_duration

JOB_MONITOR = "hami-monitor"
JOB_SCHEDULER = "hami-scheduler"
JOB_DEVICE_PLUGIN = "hami-device-plugin"
JOB_KSM = "kube-state-metrics"


CLUSTER = "hami-demo"


def prometheus_config(
    targets: Mapping[str, Sequence[str]],
    rule_files: list[Path],
    alertmanager: str | None,
    scrape_interval: str = "15s",
    evaluation_interval: str = "15s",
) -> str:
    """prometheus.yml scraping ``targets`` (job name -> its host:port addresses) with the rules and
    Alertmanager."""
    cfg: dict[str, Any] = {
        "global": {
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval if seconds(scrape_interval) < 10 else "10s",
            "evaluation_interval": evaluation_interval,
            "external_labels": {"cluster": CLUSTER},
        },
        # with --enable-feature=exemplar-storage (monitoring.EXEMPLAR_STORAGE): a slow bucket's trace
        "storage": {"exemplars": {"max_exemplars": 100_000}},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": list(addrs)}]} for job, addrs in targets.items()
        ],
    }
    if alertmanager is not None:
        cfg["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    return yaml.safe_dump(cfg, sort_keys=False)


def alertmanager_config(
    shipped: str, sink_url: str, group_wait: str = "10s", group_interval: str = "30s"
) -> str:
    """The shipped configuration (routes, inhibitions) with its receivers sending to ``sink_url``."""
    cfg: dict[str, Any] = yaml.safe_load(shipped)
    cfg["route"].update(group_wait=group_wait, group_interval=group_interval)
    for receiver in cfg["receivers"]:
        receiver["webhook_configs"] = [{"url": sink_url, "send_resolved": True}]
    return yaml.safe_dump(cfg, sort_keys=False)


def fast_rules(rules_text: str, factor: float = 1 / 60) -> str:
    """The rules with every alert's ``for:`` and every group's own ``interval:`` multiplied by
    ``factor`` (default: minutes become seconds), so that a test sees alerts fire within seconds while
    a transient shorter than the scaled ``for:`` still does not fire; expressions, thresholds and labels
    are unchanged."""
    data: dict[str, Any] = yaml.safe_load(rules_text)
    for group in data["groups"]:
        if "interval" in group:
            group["interval"] = f"{round(seconds(group['interval']) * factor * 1000)}ms"
        for rule in group["rules"]:
            if "alert" in rule and "for" in rule:
                rule["for"] = f"{round(seconds(rule['for']) * factor * 1000)}ms"
    return yaml.safe_dump(data, sort_keys=False, width=1000)


def seconds(duration: str) -> float:
    """A Prometheus duration (``1h30m``, ``5m``, ``250ms``) in seconds."""
    return parse_prometheus_duration(duration).total_seconds()
