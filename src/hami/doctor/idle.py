"""Idle allocations: pods that hold vGPU memory and ran no kernel for a while, as a reclaim table.

Reads the monitor's series from Prometheus. Idle is decided by HAMi-core's last-kernel time alone, as
the HAMiVGPUIdle alert decides it: SM utilisation is a sampled rate that reads 0 between short kernels,
so the table shows its peak over the idle window as evidence, not as the test.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from hami.core import readable
from hami.core.codec.nodelock import format_rfc3339
from hami.core.promapi import QueryFn
from hami.doctor.findings import OK, WARNING, Finding, Section, Table
from hami.doctor.nodeprotocol import age


@dataclass(frozen=True)
class IdlePod:
    namespace: str
    pod: str
    node: str
    memory_bytes: float
    idle_seconds: float
    sm_peak_percent: float | None


def _key(labels: dict[str, str]) -> tuple[str, str]:
    return labels.get("namespace", ""), labels.get("pod", "")


def find_idle(query: QueryFn, monitor_job: str, idle_for: timedelta) -> list[IdlePod] | None:
    """Idle pods, most memory first; None when Prometheus holds no last-kernel series at all."""
    mon = f'job="{monitor_job}"'
    threshold = int(idle_for.total_seconds())
    # A pod is idle when none of its containers ran a kernel: the most recent kernel across them.
    elapsed = query(f"min by (namespace, pod, node) (hami_container_last_kernel_elapsed_seconds{{{mon}}})")
    if not elapsed:
        return None
    memory = {
        _key(s.labels): s.value
        for s in query(f"sum by (namespace, pod) (hami_vgpu_memory_limit_bytes{{{mon}}})")
    }
    sm = {
        _key(s.labels): s.value
        for s in query(
            f"max by (namespace, pod) (max_over_time(hami_vgpu_core_used_percent{{{mon}}}[{threshold}s]))"
        )
    }
    idle = [
        IdlePod(*_key(s.labels), s.labels.get("node", ""), memory.get(_key(s.labels), 0.0), s.value,
                sm.get(_key(s.labels)))
        for s in elapsed
        if s.value >= threshold
    ]  # fmt: skip
    return sorted(idle, key=lambda p: (-p.memory_bytes, p.namespace, p.pod))


def idle_section(pods: list[IdlePod] | None, monitor_job: str, idle_for: timedelta, now: datetime) -> Section:
    section = Section("idle vGPU allocations")
    limit = age(now - idle_for, now)
    if pods is None:
        section.findings.append(
            Finding(
                WARNING,
                "idle.no_data",
                f'Prometheus holds no hami_container_last_kernel_elapsed_seconds{{job="{monitor_job}"}}',
                fix="check that Prometheus scrapes the vGPU monitor under that job (--monitor-job), and "
                "that pods with vGPUs run on the node",
            )
        )
        return section
    if not pods:
        section.findings.append(Finding(OK, "idle.none", f"no pod holds a vGPU without a kernel for {limit}"))
        return section
    held = sum(p.memory_bytes for p in pods)
    section.findings.append(
        Finding(
            WARNING,
            "idle.pods",
            f"{len(pods)} pods hold {readable.size_bytes(held)} of vGPU memory and ran no kernel for {limit} "
            "or more",
            fix="ask the owners to release them (scale the workload down or delete the pod); the "
            "HAMiVGPUIdle alert fires on the same condition",
        )
    )
    section.tables.append(
        Table(
            "reclaim, most memory first",
            ("NAMESPACE", "POD", "NODE", "MEMORY HELD", "IDLE SINCE", "IDLE FOR", "SM PEAK"),
            tuple(
                (
                    p.namespace,
                    p.pod,
                    p.node,
                    readable.size_bytes(p.memory_bytes),
                    format_rfc3339(now - timedelta(seconds=p.idle_seconds)),
                    age(now - timedelta(seconds=p.idle_seconds), now),
                    "-" if p.sm_peak_percent is None else readable.percent(p.sm_peak_percent),
                )
                for p in pods
            ),
        )
    )
    return section
