"""The device plugin's own metrics (metrics contract, "Device plugin (:9396)").

HAMi's plugin exports none (§C.10); these are new names and follow Prometheus conventions.

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hami.core.devices import ENFORCEMENTS, DeviceInfo
from hami.core.kube.metrics import kube_metrics
from hami.core.serve import build_info, listener_metrics
from hami.core.serve.describe import DescribingRegistry, MetricDescriptor
from hami.core.tracing import tracing_metrics
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.container_setup import REASONS
from hami.deviceplugin.specdir import REASONS as SPEC_ERRORS

# kube-scheduler style exponential buckets from 0.1 ms.
ALLOCATE_BUCKETS = tuple(0.0001 * 2**i for i in range(16))

HEALTH_EVENTS = (
    "xid_critical",  # a critical Xid marked the device unhealthy
    "xid_ignored",  # an application Xid or a disabled one
    "non_xid_skipped",  # ECC and other non-Xid events
    "wait_error",  # the NVML event wait failed: every device unhealthy
    "registration_failed",  # the device could not join the event set: unhealthy
    "not_supported",  # too old for health checks: stays healthy
    # opt-in checks (--health-checks): each marks the device unhealthy until NVML says it recovered
    "ecc_double_bit",
    "retired_pages_pending",
    "row_remap_failure",
    "temperature_slowdown",
    "device_lost",
    "recovered",  # one of the opt-in reasons cleared
)
REGISTER_RESULTS = ("success", "unchanged", "failure")
ALLOCATE_RESULTS = ("success", "failure")


class PluginMetrics:
    def __init__(self, registry: CollectorRegistry, node: str) -> None:
        self.node = node
        self.allocate_duration = Histogram(
            "hami_deviceplugin_allocate_duration_seconds",
            "Time to answer one kubelet Allocate call, by result (success/failure).",
            ["node", "result"],
            buckets=ALLOCATE_BUCKETS,
            registry=registry,
        )
        self.allocate_errors = Counter(
            "hami_deviceplugin_allocate_errors_total",
            "Allocate calls that failed, by reason (docs/guides/device-plugin-debugging.md §4.4 failure "
            "table).",
            ["node", "reason"],
            registry=registry,
        )
        self.register = Counter(
            "hami_deviceplugin_register_total",
            "Node register-annotation attempts, by result (success = patched, unchanged, failure).",
            ["node", "result"],
            registry=registry,
        )
        self.register_last_success = Gauge(
            "hami_deviceplugin_register_last_success_timestamp_seconds",
            "Unix time of the last register loop pass that left the annotation current.",
            ["node"],
            registry=registry,
        )
        self.cdi_spec_errors = Counter(
            "hami_deviceplugin_cdi_spec_errors_total",
            "Failed writes of the node's CDI spec (cdi-* device list strategies), by reason "
            "not_writable/no_space/io_error; the plugin does not start until one succeeds.",
            ["node", "reason"],
            registry=registry,
        )
        self.grpc_restarts = Counter(
            "hami_deviceplugin_grpc_restarts_total",
            "Times the kubelet-facing gRPC server was found dead (stopped, socket gone or not answering) "
            "and served again.",
            ["node", "resource"],
            registry=registry,
        )
        self.kubelet_registered = Gauge(
            "hami_deviceplugin_kubelet_registered",
            "1 while the plugin is registered with the kubelet, else 0.",
            ["node", "resource"],
            registry=registry,
        )
        self.device_health = Gauge(
            "hami_device_health",
            "1 when the GPU is healthy as advertised to the kubelet, 0 when unhealthy.",
            ["node", "device_uuid", "device_index", "device_type"],
            registry=registry,
        )
        self.health_events = Counter(
            "hami_deviceplugin_health_events_total",
            "NVML health events seen, by device and what was done with them.",
            ["node", "device_uuid", "event"],
            registry=registry,
        )
        self.split_count = Gauge(
            "hami_device_split_limit",
            "Configured deviceSplitCount: vGPU slots per physical GPU.",
            ["node"],
            registry=registry,
        )
        self.memory_scaling = Gauge(
            "hami_device_memory_scaling",
            "Configured deviceMemoryScaling (> 1 is memory over-commit).",
            ["node"],
            registry=registry,
        )
        self.core_scaling = Gauge(
            "hami_device_core_scaling",
            "Configured deviceCoreScaling.",
            ["node"],
            registry=registry,
        )
        self.memory_enforcement = Gauge(
            "hami_device_memory_enforcement",
            "1 for who enforces vGPU memory limits on this node's cards (hami-core or driver), else 0",
            ["node", "enforcement"],
            registry=registry,
        )
        # every bounded label value at 0 from the start, so that increase() sees the first event
        for result in ALLOCATE_RESULTS:
            self.allocate_duration.labels(node, result)
        for reason in REASONS:
            self.allocate_errors.labels(node, reason)
        for result in REGISTER_RESULTS:
            self.register.labels(node, result)
        for reason in SPEC_ERRORS:
            self.cdi_spec_errors.labels(node, reason)

    def set_config(self, cfg: PluginConfig) -> None:
        self.split_count.labels(self.node).set(cfg.device_split_count)
        self.memory_scaling.labels(self.node).set(cfg.device_memory_scaling)
        self.core_scaling.labels(self.node).set(cfg.device_core_scaling)
        for mode in ENFORCEMENTS:
            self.memory_enforcement.labels(self.node, mode).set(1 if cfg.memory_enforcement == mode else 0)

    def set_devices(self, devices: Sequence[DeviceInfo]) -> None:
        """Replaces the per-device health series so removed GPUs disappear; a device's health-event
        counters start at 0 (HAMiGPUDeviceUnhealthy-style increase() needs the 0)."""
        self.device_health.clear()
        for dev in devices:
            self.device_health.labels(self.node, dev.id, str(dev.index), dev.type).set(1 if dev.health else 0)
            for event in HEALTH_EVENTS:
                self.health_events.labels(self.node, dev.id, event)

    def health_event(self, uuid: str, event: str) -> None:
        if event not in HEALTH_EVENTS:  # label values stay a bounded set
            raise ValueError(f"unknown health event {event!r}")
        self.health_events.labels(self.node, uuid, event).inc()

    def set_kubelet_registered(self, resource: str, registered: bool) -> None:
        self.grpc_restarts.labels(self.node, resource)  # 0 from registration on
        self.kubelet_registered.labels(self.node, resource).set(1 if registered else 0)


def describe() -> list[MetricDescriptor]:
    """The device plugin's metric descriptors, declared in the order its ``run()`` declares them
    (docs/metrics.md)."""
    registry = DescribingRegistry()
    build_info("device-plugin", registry)
    PluginMetrics(registry, node="")
    tracing_metrics(registry)
    kube_metrics(registry)
    listener_metrics(registry)
    return registry.descriptors()
