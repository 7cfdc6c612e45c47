"""What the stack runs: the daemons this checkout has, the ports (the demo's defaults are the daemons'
documented ports) and the options ``hami.demo.stack.Stack`` starts with."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from hami.demo.monitoring import RULES

# Daemons and the module that marks each as present in this checkout.
MONITOR, SCHEDULER, DEVICE_PLUGIN = "monitor", "scheduler", "deviceplugin"
MODULES = {
    MONITOR: "hami.exporter.main",
    SCHEDULER: "hami.scheduler.extender.main",
    DEVICE_PLUGIN: "hami.deviceplugin.main",
}


def installed(component: str) -> bool:
    try:
        return importlib.util.find_spec(MODULES[component]) is not None
    except ModuleNotFoundError:
        return False


@dataclass
class Ports:
    """0 = a free port from the OS. The demo's defaults are the daemons' documented ports."""

    kubeapi: int = 0
    ksm: int = 0
    alertsink: int = 0  # Alertmanager's webhook receiver (notifications to a file)
    extender: int = 0  # the extender's /filter and /bind
    monitor: int = 9394
    scheduler: int = 9395
    deviceplugin: int = 9396
    drivermonitor: int = 0  # driver-node's monitor (its device plugin runs --memory-enforcement driver)
    driverplugin: int = 0  # driver-node's device plugin metrics
    prometheus: int = 9090
    alertmanager: int = 9093


@dataclass
class StackOptions:
    workdir: Path
    host: str = "127.0.0.1"
    ports: Ports = field(default_factory=Ports)
    rules: Path = RULES
    scrape_interval: str = "15s"
    evaluation_interval: str = "15s"
    gpus: int = 4
    scenarios: bool = True  # stale node, pending pods, over-limit, GPU faults, XIDs, capacity scenarios
    xid_every: float = 60.0
    leak_rate: float = 4.0  # MiB/s of the over-commit scenario's leaking container
    churn_every: float = 30.0  # a batch pod created (and scheduled through the extender) this often
    schedule_every: float = 2.0
    sim_interval: float = 1.0
    components: tuple[str, ...] = (MONITOR, SCHEDULER, DEVICE_PLUGIN)
    ready_timeout: float = 120.0
    node_lock_timeout: str = ""  # the scheduler's --node-lock-timeout; "" keeps its default (5m)
    tracing: str = ""  # an OTLP/HTTP endpoint: the three daemons run with --enable-tracing into it
    control_plane: str = "emulator"  # or "real": hami.testing.controlplane (controlplane/stackkube.py)
