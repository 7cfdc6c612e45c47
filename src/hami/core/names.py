"""The names an install carries, as HAMi's guides type them: labels, workloads, containers,
ConfigMaps, ports.

One place for them: the Helm chart's drift test checks the chart against these, and hami-doctor, the
extender's role labels, the recipe table and the demo take them from here. Object names are those of
the release ``hami`` (the chart prefixes them with the release's full name); labels do not depend on
the release.
"""

from __future__ import annotations

from typing import Final

RELEASE: Final = "hami"
NAMESPACE: Final = "kube-system"  # where the guides install it (the chart: the release namespace)
PART_OF: Final = "hami"

# Pod labels. ``app`` is what the guides select on (`kubectl get pods -l app=hami-scheduler`);
# ``app.kubernetes.io/component`` is what HAMi's own code selects on (the role labels).
APP_LABEL: Final = "app"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
SCHEDULER_APP: Final = "hami-scheduler"
DEVICE_PLUGIN_APP: Final = "hami-device-plugin"
MONITOR_APP: Final = "hami-vgpu-monitor"
# kubectl logs/exec/attach pick this container when none is named.
DEFAULT_CONTAINER_ANNOTATION: Final = "kubectl.kubernetes.io/default-container"

# Workloads and their containers.
SCHEDULER_DEPLOYMENT: Final = "hami-scheduler"
EXTENDER_CONTAINER: Final = "vgpu-scheduler-extender"
KUBE_SCHEDULER_CONTAINER: Final = "kube-scheduler"
DEVICE_PLUGIN_DAEMONSET: Final = "hami-device-plugin"
DEVICE_PLUGIN_CONTAINER: Final = "device-plugin"
MONITOR_DAEMONSET: Final = "hami-vgpu-monitor"
MONITOR_CONTAINER: Final = "vgpu-monitor"

# ConfigMaps.
DEVICE_CONFIGMAP: Final = "hami-scheduler-device"  # key device-config.yaml
DEVICE_CONFIG_KEY: Final = "device-config.yaml"
SCHEDULER_CONFIGMAP: Final = "hami-scheduler-config"  # kube-scheduler's KubeSchedulerConfiguration
NODE_CONFIGMAP: Final = "hami-device-plugin"  # key config.json (per-node overrides)

# Services and the Lease.
SCHEDULER_SERVICE: Final = "hami-scheduler"  # the webhook's
SCHEDULER_LEASE: Final = "hami-scheduler"

# Ports in the pods. The extender listens on 443 as HAMi's does, so `https+insecure://<POD_IP>/...`
# (no port) reaches it.
EXTENDER_PORT: Final = 443
WEBHOOK_PORT: Final = 8443
MONITOR_METRICS_PORT: Final = 9394
SCHEDULER_METRICS_PORT: Final = 9395
DEVICE_PLUGIN_METRICS_PORT: Final = 9396


def selector(app: str) -> str:
    """The label selector of the guides, e.g. ``app=hami-scheduler``."""
    return f"{APP_LABEL}={app}"
