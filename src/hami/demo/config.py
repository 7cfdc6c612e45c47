"""The configuration the demo's daemons run with, written where a cluster keeps it: the chart's values
(so the installed Deployment and ConfigMaps say what the daemons do, and ``hami-doctor snapshot``
reads it there), the device plugin's node config, and the extender flags taken from the chart's pod.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hami.core import names
from hami.testing import cluster

# The extender flags of the chart's scheduler pod that the demo's extender runs with as well.
CHART_FLAGS = (
    "--node-scheduler-policy",
    "--gpu-scheduler-policy",
    "--node-lock-timeout",
    "--kube-qps",
    "--kube-burst",
)


def node_config_json(scenarios: bool) -> str:
    """The device plugin's per-node overrides: with the scenarios, sim-node's cards registered at 1.5
    times their memory (the over-commit scenario), as HAMi's device-plugin ConfigMap does per node."""
    scaled = {"name": cluster.NODE, "devicememoryscaling": cluster.MEMORY_SCALING}
    return json.dumps({"nodeconfig": [scaled] if scenarios else []}) + "\n"


def demo_values(scenarios: bool) -> dict[str, Any]:
    """Chart values over the production template: HAMi's default policies, which the demo's
    scenarios are placed under, and the node config the device plugin reads."""
    policies = {"nodeSchedulerPolicy": "binpack", "gpuSchedulerPolicy": "spread"}
    return {
        "scheduler": {"defaultSchedulerPolicy": policies},
        "devicePlugin": {"nodeConfiguration": {"config": node_config_json(scenarios)}},
    }


def chart_flags(pod: Mapping[str, Any]) -> list[str]:
    """``CHART_FLAGS`` as the chart's scheduler pod passes them to its extender container."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == names.EXTENDER_CONTAINER:
            args = [str(a) for a in container.get("args") or []]
            return [a for a in args if a.partition("=")[0] in CHART_FLAGS and "=" in a]
    return []
