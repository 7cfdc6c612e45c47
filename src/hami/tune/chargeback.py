"""Chargeback: GPU memory and core time per pod over a window, under the reserved and used policies.

Reads the recording rules of alerts/ (hami-chargeback.rules), never the raw series, so the report,
the per-tenant dashboard and the promtool-proven identity Σ tenants + idle = capacity are one
computation. Time is integrated with a subquery at a fixed step (`x[since:step]` summed, times the
step), which does not depend on the rules' evaluation interval.

Cost, when a price per card-hour is given for a GPU model, follows the memory share: a model's price per
byte-second is the price of one card-hour over one card's mean capacity in the window, so the tenants'
cost plus the idle cost is the price of every card-hour of that model.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass, field

from hami.core.promapi import QueryFn

GIB = 1024**3
POLICIES = ("reserved", "used")
# Idle under each policy, and the capacity it is idle against (the rules' metric names).
_IDLE = {"reserved": "unreserved", "used": "unused"}
_CAPACITY = {"reserved": "schedulable", "used": "physical"}
IDLE = "(idle)"  # the namespace of the idle rows: no Kubernetes namespace has parentheses


@dataclass
class Row:
    namespace: str
    pod: str
    gpu_model: str
    memory_gib_hours: dict[str, float] = field(default_factory=dict)  # by policy
    core_card_hours: dict[str, float] = field(default_factory=dict)  # SM time, in whole-card hours
    cost: dict[str, float] = field(default_factory=dict)  # by policy, only for priced models


def _integral(metric: str, by: str, since: str, step_s: int) -> str:
    return f"sum by ({by}) (sum_over_time({metric}[{since}:{step_s}s])) * {step_s}"


def collect(query: QueryFn, since: str, step_s: int, prices: Mapping[str, float]) -> list[Row]:
    """One row per (namespace, pod, GPU model) and one idle row per GPU model, sorted; `since` is a
    Prometheus duration, `prices` maps a GPU model (the device_type label) to a price per card-hour."""
    rows: dict[tuple[str, str, str], Row] = {}

    def row(ns: str, pod: str, model: str) -> Row:
        return rows.setdefault((ns, pod, model), Row(ns, pod, model))

    for policy in POLICIES:
        idle, cap = _IDLE[policy], _CAPACITY[policy]
        per_byte_second: dict[str, float] = {}
        mean_cap = (
            f"sum by (device_type) (sum_over_time(node_device:hami_gpu_memory_{cap}_bytes:max"
            f"[{since}:{step_s}s]))\n/ sum by (device_type) (count_over_time("
            f"node_device:hami_gpu_memory_{cap}_bytes:max[{since}:{step_s}s]))"
        )
        for s in query(mean_cap) if prices else []:
            model = s.labels.get("device_type", "")
            if model in prices and s.value > 0:
                per_byte_second[model] = prices[model] / 3600 / s.value
        for resource, unit, scale in (
            ("memory", "bytes", 1 / GIB / 3600),
            ("core", "percent", 1 / 100 / 3600),
        ):
            tenants = f"namespace_pod:hami_gpu_{resource}_{policy}_{unit}:sum"
            idle_rec = f"node_device:hami_gpu_{resource}_{idle}_{unit}:sum"
            found = [
                (
                    s.labels.get("namespace", ""),
                    s.labels.get("pod", ""),
                    s.labels.get("device_type", ""),
                    s.value,
                )
                for s in query(_integral(tenants, "namespace, pod, device_type", since, step_s))
            ]
            found += [
                (IDLE, "", s.labels.get("device_type", ""), s.value)
                for s in query(_integral(idle_rec, "device_type", since, step_s))
            ]
            for ns, pod, model, value in found:
                r = row(ns, pod, model)
                if resource == "memory":
                    r.memory_gib_hours[policy] = value * scale
                    if model in per_byte_second:
                        r.cost[policy] = value * per_byte_second[model]
                else:
                    r.core_card_hours[policy] = value * scale
    return [rows[k] for k in sorted(rows)]


COLUMNS = (
    "namespace",
    "pod",
    "gpu_model",
    *(f"{p}_memory_gib_hours" for p in POLICIES),
    *(f"{p}_core_card_hours" for p in POLICIES),
    *(f"{p}_cost" for p in POLICIES),
)


def _cells(r: Row) -> list[str]:
    def num(d: dict[str, float], p: str) -> str:
        return f"{d[p]:.10g}" if p in d else ""

    return [
        r.namespace,
        r.pod,
        r.gpu_model,
        *(num(r.memory_gib_hours, p) for p in POLICIES),
        *(num(r.core_card_hours, p) for p in POLICIES),
        *(num(r.cost, p) for p in POLICIES),
    ]


def to_csv(rows: list[Row]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(_cells(r) for r in rows)
    return out.getvalue()


def to_text(rows: list[Row]) -> str:
    table = [list(COLUMNS), *(_cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n" for line in table
    )
