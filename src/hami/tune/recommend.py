"""Pure recommendation functions: measured inputs in, a recommendation with its reasons out.

Nothing here talks to Prometheus; `hami.tune.collect` turns query results into these inputs. The
reasons cite the tuning guide this repository ships, docs/guides/tuning.md, by section.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hami.core.duration import format_duration
from hami.tune import tables


@dataclass(frozen=True)
class Evidence:
    """One PromQL query and the value it returned (None: no sample)."""

    query: str
    value: float | None
    label: str = ""


@dataclass(frozen=True)
class Recommendation:
    parameter: str
    value: str | None  # None: refused
    current: str | None = None
    reasons: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    missing: tuple[str, ...] = ()  # series whose absence made us refuse
    details: dict[str, str] = field(default_factory=dict)
    # The guide's value for a cluster without history, shown beside a refusal and never as `value`,
    # so that no number looks measured when it is not.
    start: str | None = None

    @property
    def refused(self) -> bool:
        return self.value is None

    @property
    def changed(self) -> bool:
        """A measured value that differs from the current one (a silent rule keeps the current)."""
        return self.value is not None and self.value != self.current


def refuse(
    parameter: str, missing: tuple[str, ...], evidence: tuple[Evidence, ...] = (), *, start: str | None = None
) -> Recommendation:
    return Recommendation(
        parameter,
        None,
        reasons=(f"refusing to guess: no data for {', '.join(missing)}",),
        evidence=evidence,
        missing=missing,
        start=start,
    )


def short_history(
    parameter: str,
    series: str,
    window: str,
    need_seconds: float,
    have_seconds: float,
    *,
    evidence: tuple[Evidence, ...] = (),
    start: str | None = None,
) -> Recommendation:
    """Refusal of a recommendation computed over ``window`` when Prometheus holds less history."""
    have = f"{have_seconds / 3600:.1f}h" if have_seconds >= 3600 else f"{have_seconds / 60:.0f}m"
    return Recommendation(
        parameter,
        None,
        reasons=(
            f"refusing: {parameter} is computed over --window {window}, and Prometheus holds only {have} of "
            f"{series}; wait until the history covers the window, or pass a --window it covers",
        ),
        evidence=evidence,
        missing=(f"{window} of {series} history (have {have})",),
        details={
            "needed_seconds": f"{need_seconds:.0f}",
            "history_seconds": f"{have_seconds:.0f}",
            "window": window,
        },
        start=start,
    )


# --- deviceMemoryScaling (§3) ------------------------------------------------------------------------


def safe_overcommit_ratio(requested_bytes: float, peak_used_bytes: float) -> float:
    """(Σ requested / Σ peak used) × 0.9; peak must be positive."""
    if peak_used_bytes <= 0:
        raise ValueError("peak used memory must be positive")
    return requested_bytes / peak_used_bytes * tables.OVERCOMMIT_SAFETY_FACTOR


def scaling_for_ratio(ratio: float) -> tuple[float, str]:
    """Clamp a safe ratio to the guide's range, rounded down to 0.1, with the reason."""
    if ratio < tables.SCALING_DEFAULT:
        return tables.SCALING_DEFAULT, (
            "usage is not far below requests: do not over-commit, keep 1.0 (docs/guides/tuning.md §3.3)"
        )
    if ratio > tables.SCALING_MAX:
        return tables.SCALING_MAX, (
            f"capped at {tables.SCALING_MAX} (aggressive over-commit, docs/guides/tuning.md §3.1)"
        )
    return math.floor(ratio * 10 + 1e-9) / 10, "rounded down to 0.1"


@dataclass(frozen=True)
class NodeMemory:
    node: str
    requested_bytes: float
    peak_used_bytes: float
    current_scaling: float | None = None
    peak_physical_ratio: float | None = None  # max over the window of host used/total, any card


def _node_scaling(n: NodeMemory) -> tuple[float | None, str]:
    if n.peak_used_bytes <= 0:
        return None, "no memory used in the window"
    ratio = safe_overcommit_ratio(n.requested_bytes, n.peak_used_bytes)
    value, why = scaling_for_ratio(ratio)
    if (
        n.current_scaling is not None
        and n.current_scaling > tables.SCALING_DEFAULT
        and n.peak_physical_ratio is not None
        and n.peak_physical_ratio >= tables.PHYSICAL_MEMORY_RISK_RATIO
    ):
        return tables.SCALING_DEFAULT, (
            f"physical memory reached {n.peak_physical_ratio:.0%} on an over-committed card: "
            "reduce to 1.0 (docs/guides/tuning.md §6.1)"
        )
    return value, f"safe ratio {ratio:.2f}, {why}"


# The series behind the physical-memory guard, named when it has no data.
PHYSICAL_SERIES = "hami_host_gpu_memory_used_bytes / hami_host_gpu_memory_total_bytes"


def _held(n: NodeMemory) -> float:
    """The value a node keeps while a raise on it cannot be checked: its current one, or 1.0."""
    return n.current_scaling if n.current_scaling is not None else tables.SCALING_DEFAULT


def _unguarded(n: NodeMemory, value: float) -> bool:
    """A raise on a node whose physical-memory guard had no data: it must not be advised."""
    return n.peak_physical_ratio is None and value > _held(n)


def recommend_memory_scaling(
    nodes: list[NodeMemory], evidence: tuple[Evidence, ...] = (), history_seconds: float | None = None
) -> Recommendation:
    name = "deviceMemoryScaling"
    requested = sum(n.requested_bytes for n in nodes)
    peak = sum(n.peak_used_bytes for n in nodes)
    if not nodes or peak <= 0:
        return refuse(name, ("hami_vgpu_memory_used_bytes (no non-zero usage)",), evidence)
    ratio = safe_overcommit_ratio(requested, peak)
    value, why = scaling_for_ratio(ratio)
    reasons = [
        f"safe ratio = (Σ requested / Σ peak used) × {tables.OVERCOMMIT_SAFETY_FACTOR} = "
        f"({requested / tables.GIB:.1f} GiB / {peak / tables.GIB:.1f} GiB) × "
        f"{tables.OVERCOMMIT_SAFETY_FACTOR} = {ratio:.2f} (docs/guides/tuning.md §3.3); {why}",
    ]
    details: dict[str, str] = {"safe_ratio": f"{ratio:.4f}"}
    per_node = {n.node: _node_scaling(n) for n in nodes}
    risky = [node for node, (v, r) in per_node.items() if v is not None and "§6.1" in r]
    missing: list[str] = []
    if risky:
        value = tables.SCALING_DEFAULT
        reasons.append(
            f"nodes {', '.join(sorted(risky))} ran out of physical memory: 1.0 globally "
            "(docs/guides/tuning.md §6.1)"
        )
    # A raise is safe only where physical memory was seen to stay below the risk ratio: a node without
    # that data blocks the raise, on itself and globally, and says so (never skipped silently).
    blind = [n for n in nodes if _unguarded(n, value)]
    if blind:
        value = min(value, *(_held(n) for n in blind))
        missing.append(f"{PHYSICAL_SERIES} on {', '.join(sorted(n.node for n in blind))}")
        reasons.append(
            f"raise blocked: the physical-memory guard (docs/guides/tuning.md §6.1) has no data for "
            f"{', '.join(sorted(n.node for n in blind))} in the window, so over-commit cannot be checked "
            f"against the cards' memory; keep {value:g} until hami_host_gpu_memory_used_bytes and "
            "hami_host_gpu_memory_total_bytes are scraped there over the whole --window"
        )
    for n in nodes:
        v, r = per_node[n.node]
        if v is not None and _unguarded(n, v):
            per_node[n.node] = (_held(n), f"{r}; raise blocked: no physical-memory data")
    for node, (v, r) in sorted(per_node.items()):
        if v is not None and v != value:
            details[f"node/{node}"] = f"{v:g}"
            reasons.append(f"node {node}: devicememoryscaling {v:g} in nodeconfig ({r})")
    if history_seconds is not None and history_seconds < 7 * 86400:
        reasons.append(
            f"peaks cover only {history_seconds / 3600:.1f}h of data; the guide observes a week before "
            "settling the ratio (docs/guides/tuning.md §3.3)"
        )
    currents = {n.current_scaling for n in nodes if n.current_scaling is not None}
    current = ", ".join(f"{c:g}" for c in sorted(currents)) if currents else None
    return Recommendation(
        name, f"{value:g}", current, tuple(reasons), evidence, missing=tuple(missing), details=details
    )


# --- deviceSplitCount (§4) ---------------------------------------------------------------------------


def split_for_min_request(min_request_bytes: float, nodes: int | None) -> tuple[int, str]:
    gib = min_request_bytes / tables.GIB
    for row in tables.SPLIT_ROWS:
        if gib >= row.min_request_gib:
            count, label = row.split_count, row.label
            break
    if count > tables.SPLIT_LARGE_CLUSTER_MAX and (
        nodes is None or nodes >= tables.SPLIT_LARGE_CLUSTER_NODES
    ):
        where = "node count unknown" if nodes is None else f"{nodes} nodes"
        return tables.SPLIT_LARGE_CLUSTER_MAX, (
            f"smallest request {gib:.2f} GiB ({label}): 30-50, kept at {tables.SPLIT_LARGE_CLUSTER_MAX} "
            f"({where}; docs/guides/tuning.md §4.5 keeps large clusters within 30)"
        )
    return count, f"smallest request {gib:.2f} GiB ({label}) -> {count} (docs/guides/tuning.md §4.3)"


def next_split_step(count: int) -> int:
    for step in tables.SPLIT_STEPS:
        if step > count:
            return step
    return count


@dataclass(frozen=True)
class SplitInputs:
    min_request_bytes: float
    nodes: int | None
    current_split: int | None
    pending_pods: float | None  # most GPU pods pending at once in the last hour
    saturated_devices: float | None  # devices whose shared count reached their split count; None: no data
    mean_utilisation: float | None = None  # mean device utilisation (0-1) over the window


def recommend_split_count(inp: SplitInputs, evidence: tuple[Evidence, ...] = ()) -> Recommendation:
    value, why = split_for_min_request(inp.min_request_bytes, inp.nodes)
    reasons = [why]
    util = inp.mean_utilisation
    idle = util is not None and util < tables.LOW_UTILISATION_RATIO
    if inp.saturated_devices is None and ((inp.pending_pods and inp.pending_pods > 0) or idle):
        # The raises for pending pods and idle GPUs both hinge on devices full by count: unknown, blocked.
        reasons.append(
            "raise blocked: no hami_gpu_shared_count / hami_gpu_split_limit data, so whether devices are "
            "full by count (the guard of docs/guides/tuning.md §4.3 and §6.1) is unknown"
        )
        missing = ("hami_gpu_shared_count (devices full by count)",)
        current = str(inp.current_split) if inp.current_split is not None else None
        return Recommendation("deviceSplitCount", str(value), current, tuple(reasons), evidence, missing)
    if util is not None and util < tables.LOW_UTILISATION_RATIO:
        if inp.saturated_devices and max(value, inp.current_split or 0) < tables.SPLIT_LOW_UTILISATION:
            value = tables.SPLIT_LOW_UTILISATION
            reasons.append(
                f"mean GPU utilisation {util:.0%} (< {tables.LOW_UTILISATION_RATIO:.0%}) while "
                f"{inp.saturated_devices:g} devices are full by count: the split keeps pods off idle GPUs, "
                f"raise to {value} (docs/guides/tuning.md §6.1)"
            )
        elif not inp.saturated_devices:
            reasons.append(
                f"mean GPU utilisation {util:.0%} is low, but no device is full by count: the split is not "
                "what leaves GPUs idle"
            )
    if inp.pending_pods and inp.pending_pods > 0:
        if inp.saturated_devices and inp.saturated_devices > 0:
            base = max(value, inp.current_split or 0)
            bigger = next_split_step(base)
            reasons.append(
                f"{inp.pending_pods:g} GPU pods pending while {inp.saturated_devices:g} devices are at their "
                f"split count: increase to {bigger} (docs/guides/tuning.md §4.3 verification)"
            )
            value = bigger
        else:
            reasons.append(
                f"{inp.pending_pods:g} GPU pods pending, but no device is at its split count: the split is "
                "not the limit (check memory/cores)"
            )
    current = str(inp.current_split) if inp.current_split is not None else None
    return Recommendation("deviceSplitCount", str(value), current, tuple(reasons), evidence)


# --- nodeLockExpire (§2.2, §6.1) ---------------------------------------------------------------------


@dataclass(frozen=True)
class LockInputs:
    current_seconds: float
    expired_locks: float  # locks broken because they expired, over the window
    bind_p99_seconds: float
    lock_wait_p99_seconds: float


def recommend_node_lock_expire(inp: LockInputs, evidence: tuple[Evidence, ...] = ()) -> Recommendation:
    floor = max(tables.LOCK_MIN_SECONDS, math.ceil(inp.bind_p99_seconds * tables.LOCK_BIND_MARGIN / 60) * 60)
    reasons = [
        f"p99 bind {inp.bind_p99_seconds:.2f}s: the expiry must stay above "
        f"{tables.LOCK_BIND_MARGIN} x p99 and the 2m floor, so >= {format_duration(floor)} "
        "(docs/guides/tuning.md §2.2)"
    ]
    slow_binds = inp.bind_p99_seconds * tables.LOCK_BIND_MARGIN >= inp.current_seconds
    if inp.expired_locks > 0 and slow_binds:
        value = float(max(tables.LOCK_SLOW_API_SECONDS, floor))
        reasons.append(
            f"{inp.expired_locks:g} locks expired and binds are slow: raise to 8m-10m "
            "(docs/guides/tuning.md §2.2, "
            "'node lock expired, releasing')"
        )
    elif inp.expired_locks > 0 or inp.lock_wait_p99_seconds > tables.LOCK_LONG_WAIT_SECONDS:
        value = float(max(tables.LOCK_SHORT_SECONDS, floor))
        reasons.append(
            f"{inp.expired_locks:g} expired locks, p99 lock wait {inp.lock_wait_p99_seconds:.1f}s "
            "while binds are fast: stale locks block nodes, shorten to 3m (docs/guides/tuning.md §6.1)"
        )
    else:
        value = float(max(tables.LOCK_DEFAULT_SECONDS, floor))
        reasons.append(
            "no expired locks and short lock waits: keep the 5m default (docs/guides/tuning.md §2.2)"
        )
    value = min(value, float(tables.LOCK_MAX_SECONDS))
    current = format_duration(inp.current_seconds)
    return Recommendation("nodeLockExpire", format_duration(value), current, tuple(reasons), evidence)
