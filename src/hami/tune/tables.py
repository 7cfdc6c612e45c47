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
# Steps used when pending pods call for a larger split (§4.3 "有 Pending -> 增大").
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
