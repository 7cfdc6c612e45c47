"""The tuning dashboard: the quantities of the tuning guide with its thresholds drawn
(docs/guides/tuning.md §2-§6)."""

from __future__ import annotations

from dashboards.panels import JOB, NODE, RI, Board, Line, Q, alert_thresholds
from hami.core import thresholds
from hami.tune import tables


def tuning() -> Board:
    b = Board(
        "hami-tuning",
        "HAMi / Tuning",
        "Over-commit, split, SM use, API client and node-lock quantities with the thresholds of "
        "docs/guides/tuning.md. "
        "`hami-tune --prometheus-url ...` turns them into recommended values.",
        ["job", "node"],
    )
    t = alert_thresholds()
    scaling_lines = [
        Line(tables.SCALING_DEFAULT, "green"),
        Line(1.5, "yellow"),
        Line(tables.SCALING_MAX, "red"),
    ]
    b.row("deviceMemoryScaling (§3)")
    b.timeseries(
        "Safe over-commit ratio vs current scaling",
        "none",
        [
            Q(f"node:hami_vgpu_memory_overcommit_safe:ratio{{{NODE}}}", "safe {{node}}"),
            Q("cluster:hami_vgpu_memory_overcommit_safe:ratio", "safe cluster"),
            Q("pool:hami_vgpu_memory_overcommit_safe:ratio", "safe pool {{pool}}"),
            Q(f"max by (node) (hami_device_memory_scaling{{{NODE}}})", "current {{node}}"),
        ],
        "(Σ requested / Σ 7-day peak used) × 0.9. Below 1.0: do not over-commit; 1.5 light, 2.0 aggressive.",
        lines=scaling_lines,
        width=24,
    )
    b.timeseries(
        "Memory used / limit per container",
        "percentunit",
        [
            Q(
                f"namespace_pod_container:hami_vgpu_memory_used_per_limit:ratio{{{NODE}}}",
                "{{namespace}}/{{pod}}",
            )
        ],
        "Below 30%: over-commit candidate (§5.3); persistently below 50%: raise scaling (§5.2); "
        "above 90%: OOM risk.",
        lines=[Line(0.3, "yellow"), Line(0.5, "orange"), Line(t["vgpu_memory_used_ratio"], "red")],
        minimum=0,
    )
    b.timeseries(
        "Physical memory used / total",
        "percentunit",
        [Q(f"node_device:hami_host_gpu_memory_used_per_total:ratio{{{NODE}}}", "{{node}} {{device_uuid}}")],
        "Over-committed cards near full: reduce scaling to 1.0 (§6.1).",
        lines=[Line(tables.PHYSICAL_MEMORY_RISK_RATIO, "red")],
        minimum=0,
    )
    b.row("deviceSplitCount (§4)")
    b.timeseries(
        "Split utilisation per device",
        "percentunit",
        [Q(f"node_device:hami_gpu_shared_per_split:ratio{{{NODE}}}", "{{node}} {{device_uuid}}")],
        "At 1 with pods pending: increase deviceSplitCount (§4.3).",
        lines=[Line(1, "red")],
        minimum=0,
    )
    b.timeseries(
        "Smallest vGPU memory request",
        "bytes",
        [Q(f"min(hami_vgpu_memory_limit_bytes{{{NODE}}})", "smallest request")],
        "§4.3: >= 16 GiB -> 5, 8-16 GiB -> 10, 2-8 GiB -> 20, < 2 GiB -> 30-50.",
        lines=[
            Line(row.min_request_gib * tables.GIB, "blue") for row in tables.SPLIT_ROWS if row.min_request_gib
        ],
        minimum=0,
    )
    b.timeseries(
        "Configured split count",
        "none",
        [Q(f"max by (node) (hami_device_split_limit{{{NODE}}})", "{{node}}")],
        "The table's values; 200+ node clusters stay within 30 (§4.5).",
        lines=[Line(step, "blue") for step in tables.SPLIT_STEPS],
    )
    b.timeseries(
        "GPU pods pending",
        "none",
        [Q("cluster:hami_scheduler_pending_pods:sum", "pending")],
        lines=[Line(1, "red")],
        minimum=0,
    )
    sm, quantile = thresholds.load()["windows"]["sm_use"], tables.CORE_QUANTILE_NAME
    p95 = f"namespace_pod_container:hami_vgpu_core_used_percent:{quantile}_over_time{sm}"
    b.row("gpuCorePolicy and gpucores (§5, §6.1)")
    b.timeseries(
        f"SM use {quantile} over {sm} / gpucores limit, per container",
        "percentunit",
        [
            Q(
                f"namespace_pod_container:hami_vgpu_core_used_{quantile}_per_limit:ratio{sm}{{{NODE}}}",
                "{{namespace}}/{{pod}}/{{container}}",
            )
        ],
        f"Above {tables.CORE_OVERSHOOT_RATIO}: the container is not held to its limit, gpuCorePolicy force "
        f"(§6.1). Below {tables.CORE_UNDERUSE_RATIO}: lower its gpucores (§5). A quantile over time of the "
        "gauge; hami-tune takes the same quantile over its --window.",
        lines=[Line(tables.CORE_UNDERUSE_RATIO, "yellow"), Line(tables.CORE_OVERSHOOT_RATIO, "red")],
        minimum=0,
    )
    b.timeseries(
        f"SM-use distribution across containers ({quantile} over {sm})",
        "percent",
        [
            Q(f"quantile(0.5, {p95}{{{NODE}}})", "median container"),
            Q(f"quantile(0.9, {p95}{{{NODE}}})", "90th percentile container"),
            Q(f"max({p95}{{{NODE}}})", "busiest container"),
        ],
        "How busy containers are, each by its own SM-use quantile over time.",
        minimum=0,
    )
    b.timeseries(
        "Node GPU headroom: the kubelet's vs HAMi's",
        "none",
        [
            Q(f"node:kube_gpu_allocatable_free:sum{{{NODE}}}", "kubelet {{node}}"),
            Q(f"node:hami_gpu_split_free:sum{{{NODE}}}", "HAMi {{node}}"),
        ],
        "Allocatable nvidia.com/gpu minus the requests of pods holding a place (kube-state-metrics), "
        "beside HAMi's free split slots. Apart: the two disagree on what runs on the node.",
        minimum=0,
    )
    b.row("--kube-qps / --kube-burst (§2.1)")
    b.timeseries(
        "Nodes (tier boundaries at 50 and 200)",
        "none",
        [Q(f"max(sum by (instance) (hami_scheduler_nodes{{{JOB}}}))", "nodes")],
        lines=[Line(tier.min_nodes, "blue") for tier in tables.CLIENT_TIERS[1:3]],
        width=8,
    )
    b.timeseries(
        "Request rate / configured QPS",
        "percentunit",
        [Q(f"job:rest_client_requests_per_qps:ratio_rate5m{{{JOB}}}", "{{job}}")],
        f"Above {tables.CLIENT_HEADROOM:.0%} the client is near its limit.",
        lines=[Line(tables.CLIENT_HEADROOM, "red")],
        width=8,
        minimum=0,
    )
    b.timeseries(
        "Rate-limiter wait (mean)",
        "s",
        [
            Q(
                f"sum(rate(rest_client_rate_limiter_duration_seconds_sum{{{JOB}}}[{RI}]))"
                f" / sum(rate(rest_client_rate_limiter_duration_seconds_count{{{JOB}}}[{RI}]))",
                "mean wait",
            )
        ],
        lines=[Line(tables.CLIENT_THROTTLED_WAIT_SECONDS, "red")],
        width=8,
    )
    b.timeseries(
        "Configured QPS and burst",
        "none",
        [
            Q(f"max(hami_kube_client_qps{{{JOB}}})", "qps"),
            Q(f"max(hami_kube_client_burst{{{JOB}}})", "burst"),
        ],
        "Tier values: QPS 5 / 20 / 50-100, burst 10 / 40 / 100-200.",
        lines=[Line(tier.qps, "blue") for tier in tables.CLIENT_TIERS],
        width=24,
    )
    b.row("nodeLockExpire (§2.2)")
    lock_lines = [
        Line(tables.LOCK_MIN_SECONDS, "blue"),
        Line(tables.LOCK_SHORT_SECONDS, "green"),
        Line(tables.LOCK_DEFAULT_SECONDS, "yellow"),
        Line(tables.LOCK_SLOW_API_SECONDS, "orange"),
        Line(tables.LOCK_MAX_SECONDS, "red"),
    ]
    b.timeseries(
        f"{tables.LOCK_BIND_MARGIN} x p99 bind latency vs expiry choices",
        "s",
        [
            Q(
                f"{tables.LOCK_BIND_MARGIN} * histogram_quantile(0.99, sum by (le) "
                f"(rate(hami_scheduler_bind_duration_seconds_bucket{{{JOB}}}[{RI}])))",
                "3 x p99 bind",
            )
        ],
        "The expiry must stay above this line: 2m floor, 3m short, 5m default, 8m slow API, 10m max.",
        lines=lock_lines,
        width=8,
    )
    b.timeseries(
        "p99 node-lock wait",
        "s",
        [
            Q(
                f"histogram_quantile(0.99, sum by (le) "
                f"(rate(hami_scheduler_node_lock_wait_seconds_bucket{{{JOB}}}[{RI}])))",
                "p99 wait",
            )
        ],
        "Long waits with fast binds: stale locks, shorten to 3m (§6.1).",
        lines=[Line(tables.LOCK_LONG_WAIT_SECONDS, "red")],
        width=8,
    )
    b.timeseries(
        "Expired locks",
        "short",
        [Q(f"sum(increase(hami_scheduler_node_lock_expired_total{{{JOB}}}[{RI}]))", "expired")],
        "'node lock expired, releasing': slow binds -> 8m-10m; fast binds -> crashed binds.",
        lines=[Line(1, "red")],
        width=8,
    )
    return b
