"""The Alertmanager configuration shipped with the rules: grouping, and inhibitions so one fault is one page.

An over-limit container matches three rules (its memory is above its limit, so also above 90 % of it,
and the monitor clamps the reading); an unhealthy GPU usually got there through the XID that is also
alerting. The more specific alert inhibits the others for the same object. HAMi's proposed alert
names (alerts/contract.py) overlap four of ours; of each pair, the one that fires first notifies.
Receivers are the operator's: the one here has no integration (the demo sends it to a file).
"""

from __future__ import annotations

from typing import Any

RECEIVER = "hami"


def _inhibit(source: str, target: str, equal: list[str], **target_labels: str) -> dict[str, Any]:
    matchers = [f'alertname="{target}"', *(f'{k}="{v}"' for k, v in target_labels.items())]
    return {"source_matchers": [f'alertname="{source}"'], "target_matchers": matchers, "equal": equal}


def inhibit_rules(cluster: str) -> list[dict[str, Any]]:
    container = [cluster, "namespace", "pod", "container", "vdevice_index", "device_uuid"]
    return [
        _inhibit("HAMiVGPUMemoryOverLimit", "HAMiGPUMemoryHigh", container),
        _inhibit(
            "HAMiVGPUMemoryOverLimit", "HAMiMonitorRegionSkips", [cluster, "node"], reason="usage_over_limit"
        ),
        _inhibit("HAMiGPUDeviceUnhealthy", "HAMiGPUXidErrors", [cluster, "node", "device_uuid"]),
        # HAMi's proposed names (alerts/contract.py) and ours that say the same: the one that fires
        # first, under the weaker condition, notifies.
        _inhibit("HAMiGPUMemoryNearlyExhausted", "HAMiGPUMemoryAllocationHigh", [cluster, "node"]),
        _inhibit("HAMiGPUCoresNearlyExhausted", "HAMiGPUCoreAllocationHigh", [cluster, "node"]),
        _inhibit("HAMiGPUMemoryHigh", "HAMivGPUMemoryNearLimit", container),
        _inhibit("HAMiVGPUMemoryOverLimit", "HAMivGPUMemoryNearLimit", container),
        _inhibit("HAMiSchedulerDown", "HAMiSchedulerMetricsAbsent", [cluster, "job"]),
    ]


def alertmanager_config(cfg: dict[str, Any]) -> dict[str, Any]:
    cluster = str(cfg["cluster_label"])
    return {
        "route": {
            "receiver": RECEIVER,
            "group_by": ["alertname", cluster, "node"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
        },
        "inhibit_rules": inhibit_rules(cluster),
        "receivers": [{"name": RECEIVER}],
    }
