"""The extender's own metrics (docs/design/metrics-contract.md, scheduler section) and HAMi's §7.1 families.

Counters and histograms are updated on the request path. Everything about cluster state (node
states, handshake ages, locks held, allocations, quotas, leadership) is computed at scrape time
from the caches by ``StateCollector``, so series of deleted nodes and pods vanish with them.

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hami.core import reasons as r

# kube-scheduler style exponential buckets, from 0.1 ms doubling to ~52 s.
LATENCY_BUCKETS: Final = tuple(0.0001 * 2**i for i in range(20))
# From a pod's creation to its bind: seconds when it fits at once, up to hours when it waits for room.
POD_BIND_BUCKETS: Final = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 10800.0)

# Failure strings that are not ``n/m Reason`` items map onto bounded label values.
_PLAIN_REASONS: Final = {
    r.NODE_UNREGISTERED: "NodeUnregistered",
    r.NODE_USAGE_UNAVAILABLE: "NodeUsageUnavailable",
    r.DEVICE_TYPE_NOT_FOUND: "DeviceTypeNotFound",
}
KNOWN_CODES: Final = frozenset(
    {
        r.CARD_TYPE_MISMATCH,
        r.CARD_UUID_MISMATCH,
        r.CARD_TIME_SLICING_EXHAUSTED,
        r.CARD_COMPUTE_UNITS_EXHAUSTED,
        r.CARD_INSUFFICIENT_MEMORY,
        r.CARD_INSUFFICIENT_CORE,
        r.CARD_NOT_HEALTH,
        r.CARD_CORDONED,
        r.NUMA_NOT_FIT,
        r.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT,
        r.CARD_NOT_FOUND_CUSTOM_FILTER_RULE,
        r.CARD_MIG_TOPOLOGY_INFEASIBLE,
        r.NODE_INSUFFICIENT_DEVICE,
        r.ALLOCATED_CARDS_INSUFFICIENT_REQUEST,
        r.NODE_UNFIT_POD,
        r.RESOURCE_QUOTA_NOT_FIT,
        r.MODE_NOT_FIT,
    }
)


# The bounded label values of the request-path families. Each is exported at 0 from start-up, so
# that increase()/rate() see the first event (a series born at 1 has no increase).
FILTER_RESULTS: Final = ("fit", "unschedulable", "passthrough", "error")
# Dry runs (ExtenderArgs with Nodes, docs/design/scheduler.md §9.3) are timed under these; they count no
# failures.
SIMULATED: Final = "simulated_"
SIMULATED_FILTER_RESULTS: Final = tuple(SIMULATED + result for result in FILTER_RESULTS)
BIND_RESULTS: Final = ("success", "error", "not_leader")
BIND_PHASES: Final = ("node_lock", "bind")
FAILURE_REASONS: Final = (*sorted(KNOWN_CODES), *_PLAIN_REASONS.values(), "Other")
EVENT_REASONS: Final = (
    "FilteringFailed", "FilteringSucceed", "BindingFailed", "BindingSucceed", "GPUCoresClamped",
    "GPUMemPercentageClamped",
)
LOCK_EXPIRY_CAUSES: Final = ("expired", "owner_gone")
# The allocation lifecycle counters HAMi's master merged after v2.10, labels bounded to device_type,
# failure_reason and phase.
DEVICE_TYPES: Final = ("NVIDIA",)
INVALID_REQUEST: Final = "InvalidRequest"  # /filter answered Error: the request itself is refused
ALLOCATION_FAILURE_REASONS: Final = (*FAILURE_REASONS, INVALID_REQUEST)
ROLLBACK_PHASES: Final = ("node_lock", "bind")
RECONCILIATION_PHASES: Final = ("register", "handshake", "role_label")
DECODE_SOURCES: Final = (
    "node_register",
    "node_pair_score",
    "pod_devices",
    "pod_mig_allocations",
)


def dominant_code(failed: Mapping[str, str]) -> str:
    """The reason code that rejected the most nodes (the first by name among equals): one pod's
    allocation failure counts once."""
    counts = Tally(code for reason in failed.values() for code in set(failure_codes(reason)))
    return min(counts, key=lambda code: (-counts[code], code)) if counts else "Other"


def failure_codes(reason: str) -> list[str]:
    """The bounded reason labels one rejected node counts under (one per reason type)."""
    parsed = [code if code in KNOWN_CODES else "Other" for code in r.parse_reason(reason)]
    if parsed:
        return parsed
    if reason in KNOWN_CODES:
        return [reason]
    return [_PLAIN_REASONS.get(reason, "Other")]


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.filter_duration = Histogram(
            "hami_scheduler_filter_duration_seconds",
            "Latency of /filter requests, by result (fit, unschedulable, passthrough, error; dry runs "
            "for nodeCacheCapable: false callers under the same values prefixed simulated_).",
            ["result"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.bind_duration = Histogram(
            "hami_scheduler_bind_duration_seconds",
            "Latency of /bind requests, by result (success, error, not_leader).",
            ["result"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.bind_phase_duration = Histogram(
            "hami_scheduler_bind_phase_duration_seconds",
            "Latency of each bind phase (node_lock; bind: the Binding, carrying the pod annotations).",
            ["phase"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.filter_failures = Counter(
            "hami_scheduler_filter_failures_total",
            "Nodes rejected by /filter, per reason code (docs/design/scheduler-filter.md §4.8); one count "
            "per node and reason type "
            "(dry runs not counted).",
            ["reason"],
            registry=registry,
        )
        self.pods_unschedulable = Counter(
            "hami_scheduler_pods_unschedulable_total",
            "Filter calls for which no node fitted the pod (dry runs not counted).",
            registry=registry,
        )
        self.events = Counter(
            "hami_scheduler_events_total",
            "Pod events recorded by the extender, by reason (FilteringFailed, FilteringSucceed, "
            "BindingFailed, BindingSucceed, GPUCoresClamped, GPUMemPercentageClamped).",
            ["reason"],
            registry=registry,
        )
        self.cores_clamped = Counter(
            "hami_scheduler_gpucores_clamped_total",
            "Pods with a nvidia.com/gpucores above 100 that /filter took as 100, as HAMi does "
            "(one count per pod, not per /filter retry or container; dry runs not counted).",
            registry=registry,
        )
        self.percentage_clamped = Counter(
            "hami_scheduler_gpumem_percentage_clamped_total",
            "Pods with a nvidia.com/gpumem-percentage above 100 that /filter took as 100, as HAMi does "
            "(one count per pod, not per /filter retry or container; dry runs not counted).",
            registry=registry,
        )
        self.node_lock_wait = Histogram(
            "hami_scheduler_node_lock_wait_seconds",
            "Time spent acquiring the hami.io/mutex.lock node lock in /bind (success or not).",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.node_lock_expired = Counter(
            "hami_scheduler_node_lock_expired_total",
            "Node locks taken over because they were older than --node-lock-timeout or their owner "
            "pod was gone.",
            ["cause"],
            registry=registry,
        )
        self.node_lock_timeout = Gauge(
            "hami_scheduler_node_lock_timeout_seconds",
            "Configured node-lock expiry (--node-lock-timeout).",
            registry=registry,
        )
        self.decode_errors = Counter(
            "hami_scheduler_decode_errors_total",
            "Annotations that failed to decode and were skipped, by source "
            "(node_register, node_pair_score, pod_devices, pod_mig_allocations).",
            ["source"],
            registry=registry,
        )
        self.api_errors = Counter(
            "hami_scheduler_api_errors_total",
            "API-server writes that failed, by operation (handshake, pod_patch, pod_label, binding, "
            "node_lock) "
            "and reason (conflict, not_found, timeout, status_<code>).",
            ["operation", "reason"],
            registry=registry,
        )
        self.register_duration = Histogram(
            "hami_scheduler_register_duration_seconds",
            "Duration of one register pass over the node cache.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.pod_creation_to_bind = Histogram(
            "hami_scheduler_pod_creation_to_bind_seconds",
            "Time from the creation of a pod requesting HAMi resources to its successful bind.",
            buckets=POD_BIND_BUCKETS,
            registry=registry,
        )
        self.decisions_evicted = Counter(
            "hami_scheduler_decision_records_evicted_total",
            "Decision records dropped because the record was full (--decision-records).",
            registry=registry,
        )
        self.register_writes = Counter(
            "hami_scheduler_register_writes_total",
            "Node patches made by register passes (handshake writes and deletes).",
            registry=registry,
        )
        self.allocations = Counter(
            "hami_scheduler_allocations_total",
            "Pods whose devices /filter reserved, by device vendor (dry runs not counted).",
            ["device_type"],
            registry=registry,
        )
        self.allocation_failures = Counter(
            "hami_scheduler_allocation_failures_total",
            "Filter calls that reserved nothing, once per pod, by device vendor and the reason code that "
            "rejected the most nodes (InvalidRequest: the filter answered an Error).",
            ["device_type", "failure_reason"],
            registry=registry,
        )
        self.bind_rollbacks = Counter(
            "hami_scheduler_bind_rollbacks_total",
            "Binds of pods with reserved devices that failed and were rolled back (node lock released, "
            "reservation kept for the retry), by the phase that failed (node_lock, bind).",
            ["phase"],
            registry=registry,
        )
        self.stale_reservations = Counter(
            "hami_scheduler_stale_reservations_total",
            "Reservations made by /filter and dropped before any bind: the pod or its node was gone.",
            ["device_type"],
            registry=registry,
        )
        self.reconciliation_errors = Counter(
            "hami_scheduler_reconciliation_errors_total",
            "Failed steps of the reconciliation loops, by phase (register: a whole register pass; "
            "handshake: a node handshake write; role_label: a scheduler pod's role label).",
            ["phase"],
            registry=registry,
        )
        # api_errors{operation,reason} is left out: its reason carries the HTTP status code.
        for family, values in (
            (self.filter_duration, FILTER_RESULTS + SIMULATED_FILTER_RESULTS),
            (self.bind_duration, BIND_RESULTS),
            (self.bind_phase_duration, BIND_PHASES),
            (self.filter_failures, FAILURE_REASONS),
            (self.events, EVENT_REASONS),
            (self.node_lock_expired, LOCK_EXPIRY_CAUSES),
            (self.decode_errors, DECODE_SOURCES),
            (self.allocations, DEVICE_TYPES),
            (self.bind_rollbacks, ROLLBACK_PHASES),
            (self.stale_reservations, DEVICE_TYPES),
            (self.reconciliation_errors, RECONCILIATION_PHASES),
        ):
            for value in values:
                family.labels(value)
        for device_type in DEVICE_TYPES:
            for reason in ALLOCATION_FAILURE_REASONS:
                self.allocation_failures.labels(device_type, reason)
