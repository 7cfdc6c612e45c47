"""The capacity dashboard: what each tenant's share of the GPUs is, and how much of them nobody uses.

Every panel reads the recording rules of alerts/capacity.py, the same series `hami-tune report` sums.
"""

from __future__ import annotations

from dashboards.panels import NAMESPACE, Board, Q

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
        ["namespace"],
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
