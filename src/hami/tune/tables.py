"""The tuning guide's tables and thresholds (docs/guides/tuning.md §2-§4, §6), as data.

The dashboards generator draws its threshold lines from these same values.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class ClientTier:
    """One row of the §2.1 cluster-size table."""

    name: str
    min_nodes: int  # inclusive lower bound of the tier
    qps: float
    burst: int
    timeout_seconds: int


# §2.1: small (< 50 nodes), medium (50-200), large (200+: QPS 50-100, burst 100-200, timeout 30 s).
CLIENT_TIERS: tuple[ClientTier, ...] = (
    ClientTier("small (< 50 nodes)", 0, 5, 10, 15),
    ClientTier("medium (50-200 nodes)", 50, 20, 40, 20),
    ClientTier("large (200+ nodes)", 200, 50, 100, 30),
    ClientTier("large (200+ nodes), upper end", 200, 100, 200, 30),
)
# A client whose peak request rate reaches this share of its QPS is near its limit.
CLIENT_HEADROOM = 0.8
# Mean wait in the client-side rate limiter that counts as throttled (same as HAMiKubeClientThrottled).
CLIENT_THROTTLED_WAIT_SECONDS = 0.05

# §3.1 table: 0.5 reserve, 1.0 default, 1.5 light, 2.0 aggressive over-commit.
SCALING_DEFAULT = 1.0
SCALING_MAX = 2.0
# §3.3: safe ratio = (Σ requested / Σ peak used) × 0.9.
OVERCOMMIT_SAFETY_FACTOR = 0.9
# Physical memory share that makes an over-committed card risky (HAMiGPUPhysicalMemoryNearFull).
PHYSICAL_MEMORY_RISK_RATIO = 0.9


@dataclass(frozen=True)
class SplitRow:
    """One branch of the §4.3 decision: smallest memory request -> deviceSplitCount."""

    min_request_gib: float  # inclusive lower bound
    split_count: int
    label: str


# §4.3: >= 16 GB -> 5, 8-16 GB -> 10, 2-8 GB -> 20, < 2 GB -> 30-50.
SPLIT_ROWS: tuple[SplitRow, ...] = (
    SplitRow(16, 5, ">= 16 GiB"),
    SplitRow(8, 10, "8-16 GiB"),
    SplitRow(2, 20, "2-8 GiB"),
    SplitRow(0, 50, "< 2 GiB"),
)
# §4.5: in clusters of 200+ nodes keep deviceSplitCount within 30 (the annotation grows with it).
SPLIT_LARGE_CLUSTER_NODES = 200
SPLIT_LARGE_CLUSTER_MAX = 30
SPLIT_DEFAULT = 10
# Steps used when pending pods call for a larger split (§4.3 "pods pending -> increase").
SPLIT_STEPS: tuple[int, ...] = (5, 10, 20, 30, 50)

# §2.2: default 5m, range 2m-10m; 8m-10m for slow API paths; §6.1: 3m when nodes stay locked.
LOCK_DEFAULT_SECONDS = 300
LOCK_MIN_SECONDS = 120
LOCK_MAX_SECONDS = 600
LOCK_SLOW_API_SECONDS = 480
LOCK_SHORT_SECONDS = 180
# A bind's p99 must fit this many times into the expiry, or a normal bind can lose its lock.
LOCK_BIND_MARGIN = 3
# p99 wait for a node lock above which nodes count as "locked for a long time".
LOCK_LONG_WAIT_SECONDS = 60.0

# --- §6.1 rows beyond §2-§4, and the §6.2 templates -------------------------------------------------

# §6.1 "GPU utilisation low: deviceSplitCount too small, raise to 20": mean device utilisation over the
# window below this, while devices are full by count, means the split keeps pods off idle GPUs.
LOW_UTILISATION_RATIO = 0.3
SPLIT_LOW_UTILISATION = 20

# §6.1 "imprecise core isolation: gpuCorePolicy force": a container whose SM use (the window's p95)
# exceeds its gpucores limit by this factor is not held to it.
CORE_OVERSHOOT_RATIO = 1.1
# The SM-use quantile taken over the window (§5's distribution, as quantile_over_time of the gauge).
CORE_QUANTILE = 0.95
CORE_QUANTILE_NAME = f"p{CORE_QUANTILE * 100:.0f}"  # in recording rule names and reasons
# §5 "SM use stays below the limit: lower gpucores": the p95 below this share of the limit.
CORE_UNDERUSE_RATIO = 0.5
# A per-pod gpucores proposal leaves this headroom above the p95 and rounds up to a multiple of 5.
CORE_HEADROOM = 1.2
CORE_STEP = 5

# §6.2: the development and production templates.
ENVIRONMENTS = ("production", "development")
CORE_POLICY = {"production": "force", "development": "disable"}
LOG_LEVEL = {"production": 0, "development": 3}
# §6.1 "CUDA applications slow down: log level too high, 0 or 1".
LOG_LEVEL_MAX_QUIET = 1


@dataclass(frozen=True)
class SchedulerResources:
    """One row of the §2.3 extender resources table (CPU in millicores, memory in MiB)."""

    name: str
    min_nodes: int
    cpu_request_m: int
    cpu_limit_m: int
    memory_request_mi: int
    memory_limit_mi: int


# §2.3: < 50 nodes, 50-200, 200+.
SCHEDULER_RESOURCES: tuple[SchedulerResources, ...] = (
    SchedulerResources("small (< 50 nodes)", 0, 100, 500, 128, 512),
    SchedulerResources("medium (50-200 nodes)", 50, 200, 1000, 256, 1024),
    SchedulerResources("large (200+ nodes)", 200, 500, 2000, 512, 2048),
)
# §6.1 "scheduler OOMKilled: memory limit too small, raise to 2Gi"; a limit already there doubles.
SCHEDULER_OOM_MEMORY_LIMIT_MI = 2048
# Working set within this share of the limit counts as about to be OOM-killed.
SCHEDULER_MEMORY_NEAR_LIMIT = 0.9

# §6.1 "monitor data missing: monitor log level too low, -v=4".
MONITOR_DEBUG_ARGS = ("-v=4",)

# The chart's defaults (charts/hami/values.yaml), the current values when --values is not given.
CHART_CORE_POLICY = "default"
CHART_LOG_LEVEL = 1

# Starting points without history (§3.3 "no monitoring: start at 1.5 and watch for a week", the
# §4.2 default split, the §6.1 client values, the §2.2 default expiry, the §2.3 values example).
START_MEMORY_SCALING = "1.5 (start there and watch for a week, docs/guides/tuning.md §3.3)"
START_SPLIT_COUNT = "10 (the general-purpose default, docs/guides/tuning.md §4.2)"
START_KUBE_CLIENT = "--kube-qps=50 --kube-burst=100 (docs/guides/tuning.md §6.1)"
START_NODE_LOCK = "5m (the default, docs/guides/tuning.md §2.2)"
START_SCHEDULER_RESOURCES = (
    "requests cpu=200m memory=256Mi, limits cpu=2000m memory=2Gi (docs/guides/tuning.md §2.3 values example)"
)
# The chart's default extender arguments: Helm replaces lists whole, so a changed flag carries them.
CHART_EXTENDER_ARGS = ("--debug", "-v=4")
