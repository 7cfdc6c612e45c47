"""The capacity dashboard: what each tenant's share of the GPUs is, and how much of them nobody uses.

Every panel reads the recording rules of alerts/capacity.py, the same series `hami-tune report` sums.
"""

from __future__ import annotations

from dashboards.panels import NAMESPACE, NODE, Board, Line, Q, alert_thresholds

GIB = 1024**3
# The tables integrate over the dashboard's time range at a 1-minute step, as `hami-tune report` does.
STEP_S = 60


def _gib_hours(policy: str) -> Q:
    rec = f"namespace_pod:hami_gpu_memory_{policy}_bytes:sum{{{NAMESPACE}}}"
    return Q(
        f"sum by (namespace, pod, device_type) (sum_over_time({rec}[$__range:{STEP_S}s]))"
        f" * {STEP_S} / 3600 / {GIB}",
        instant=True,
    )


def capacity() -> Board:
    b = Board(
        "hami-capacity",
        "HAMi / Capacity",
        "GPU memory and SM per tenant under two policies: reserved (what the scheduler allocated) and used "
        "(what HAMi-core measured), beside what nobody holds. `hami-tune report --format csv` prints the "
        "same figures for finance.",
        ["namespace", "node"],
    )
    b.row("Over-commit risk")
    b.timeseries(
        "Physical headroom vs what the vGPUs may still claim",
        "bytes",
        [
            Q(
                f"node_device:hami_host_gpu_memory_headroom_bytes:total_minus_used{{{NODE}}}",
                "headroom {{node}} {{device_uuid}}",
            ),
            Q(
                f"node_device:hami_vgpu_memory_claimable_bytes:sum{{{NODE}}}",
                "claimable {{node}} {{device_uuid}}",
            ),
        ],
        "Headroom: physical total - used. Claimable: Σ (vGPU limit - used) of the containers on the card. "
        "Claimable above headroom is only possible with deviceMemoryScaling > 1: the card can run out.",
        minimum=0,
    )
    b.timeseries(
        "Time to physical exhaustion at the last hour's growth",
        "s",
        [
            Q(
                f"node_device:hami_host_gpu_memory_exhaustion_seconds:deriv1h{{{NODE}}}",
                "{{node}} {{device_uuid}}",
            )
        ],
        "Only cards whose memory use grows. HAMiGPUOvercommitExhaustionRisk fires below the line on "
        "over-committed cards.",
        lines=[Line(alert_thresholds()["overcommit_exhaustion_horizon_seconds"], "red")],
        minimum=0,
    )
    b.row("Fragmentation")
    b.timeseries(
        "Fragmentation per GPU model",
        "percentunit",
        [Q("gpu_model:hami_fragmentation_ratio", "{{device_type}}")],
        "Share of free GPU memory on cards that cannot take the median request of the last 24 hours "
        "(too little memory or SM left, or no split slot): 0 = every free slice is usable, 1 = none is.",
        minimum=0,
    )
    b.timeseries(
        "Fragmentation per node",
        "percentunit",
        [Q(f"node:hami_fragmentation_ratio{{{NODE}}}", "{{node}}")],
        "The same per node: a node near 1 holds free memory no typical request can use.",
        minimum=0,
    )
    b.row("Truth")
    b.timeseries(
        "Allocations, regions and NVML disagreeing, per node and kind",
        "none",
        [Q(f"max by (node, kind) (hami_inconsistency{{{NODE}}}) > 0", "{{node}} {{kind}}")],
        "The monitor's reconciler: allocations without a region, regions without a pod, unreadable "
        "regions, GPU memory used outside HAMi. Empty when every node agrees.",
        minimum=0,
    )
    b.row("Idle allocations")
    b.table(
        "vGPU memory held by containers with no kernel for an hour (reclaim)",
        "bytes",
        Q(
            f"sum by (namespace, pod, node) (\n  hami_vgpu_memory_limit_bytes{{{NAMESPACE}}}\n"
            "  and on (namespace, pod, container, vdevice_index, node, device_uuid)\n"
            "  namespace_pod_container:hami_vgpu_idle_seconds:last_kernel\n)",
            instant=True,
        ),
        "The HAMiVGPUIdle condition. `hami-doctor idle --prometheus-url ...` prints the same pods with "
        "the time they went idle.",
    )
    for policy, idle, what in (
        ("reserved", "unreserved", "allocated by the scheduler, against each card's schedulable memory"),
        ("used", "unused", "measured by HAMi-core, against the physical card"),
    ):
        b.row(f"Chargeback: {policy}")
        b.timeseries(
            f"GPU memory {policy} per namespace",
            "bytes",
            [
                Q(f"namespace:hami_gpu_memory_{policy}_bytes:sum{{{NAMESPACE}}}", "{{namespace}}"),
                Q(f"sum(node_device:hami_gpu_memory_{idle}_bytes:sum)", "idle"),
            ],
            f"GPU memory {what}. Stacked with the idle remainder it adds up to the cards' capacity.",
            stack=True,
            minimum=0,
        )
        b.timeseries(
            f"SM {policy} per namespace (cards)",
            "none",
            [
                Q(f"namespace:hami_gpu_core_{policy}_percent:sum{{{NAMESPACE}}} / 100", "{{namespace}}"),
                Q(f"sum(node_device:hami_gpu_core_{idle}_percent:sum) / 100", "idle"),
            ],
            f"SM share {what.split(',')[0]}, in whole cards.",
            stack=True,
            minimum=0,
        )
        b.table(
            f"GPU memory {policy} per pod over the time range (GiB-hours)",
            "none",
            _gib_hours(policy),
            "Memory-time per pod and GPU model over the dashboard's time range.",
        )
    return b
