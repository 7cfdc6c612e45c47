"""Rules about HAMi's own components (docs/guides/tuning.md §2.3, §6.1): the extender's resources, the
monitor's verbosity, and HAMi-core's log level in the workloads.

Section signs (§) refer to docs/guides/tuning.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami.tune import tables
from hami.tune.recommend import Evidence, Recommendation

RESOURCES = "scheduler.extender.resources"
MONITOR_ARGS = "devicePlugin.monitor.extraArgs"
LOG_LEVEL = "devices.nvidia.libCudaLogLevel"
MIB = 1024**2


def resource_tier(nodes: int) -> tables.SchedulerResources:
    return [t for t in tables.SCHEDULER_RESOURCES if nodes >= t.min_nodes][-1]


@dataclass(frozen=True)
class Resources:
    """CPU in millicores, memory in MiB; None where the container sets none."""

    cpu_request_m: int | None
    cpu_limit_m: int | None
    memory_request_mi: int | None
    memory_limit_mi: int | None

    def render(self) -> str:
        def q(v: int | None, unit: str) -> str:
            return "unset" if v is None else f"{v}{unit}"

        return (
            f"requests cpu={q(self.cpu_request_m, 'm')} memory={q(self.memory_request_mi, 'Mi')}, "
            f"limits cpu={q(self.cpu_limit_m, 'm')} memory={q(self.memory_limit_mi, 'Mi')}"
        )


@dataclass(frozen=True)
class SchedulerInputs:
    nodes: int
    current: Resources | None  # None: kube-state-metrics does not report the extender's resources
    oom_kills: float | None  # containers last terminated as OOMKilled in the window; None: no series
    peak_working_set_bytes: float | None


def _at_least(current: int | None, floor: int) -> int:
    return floor if current is None else max(current, floor)


def recommend_scheduler_resources(
    inp: SchedulerInputs, evidence: tuple[Evidence, ...] = ()
) -> Recommendation:
    tier = resource_tier(inp.nodes)
    cur = inp.current or Resources(None, None, None, None)
    reasons = [f"{inp.nodes} nodes: tier {tier.name} (docs/guides/tuning.md §2.3); a current value above it "
               "is kept"]
    memory_limit = _at_least(cur.memory_limit_mi, tier.memory_limit_mi)
    if inp.oom_kills:
        raised = max(tables.SCHEDULER_OOM_MEMORY_LIMIT_MI, 2 * (cur.memory_limit_mi or 0))
        reasons.append(
            f"the extender was OOMKilled ({inp.oom_kills:g} in the window): memory limit {raised}Mi "
            "(docs/guides/tuning.md §6.1 raises it to 2Gi; a limit already there doubles)"
        )
        memory_limit = max(memory_limit, raised)
    elif (
        inp.peak_working_set_bytes is not None
        and cur.memory_limit_mi
        and inp.peak_working_set_bytes >= tables.SCHEDULER_MEMORY_NEAR_LIMIT * cur.memory_limit_mi * MIB
    ):
        raised = max(tables.SCHEDULER_OOM_MEMORY_LIMIT_MI, 2 * cur.memory_limit_mi)
        reasons.append(
            f"peak working set {inp.peak_working_set_bytes / MIB:.0f}Mi is within "
            f"{1 - tables.SCHEDULER_MEMORY_NEAR_LIMIT:.0%} of the {cur.memory_limit_mi}Mi limit: "
            f"{raised}Mi before it is OOMKilled (docs/guides/tuning.md §6.1)"
        )
        memory_limit = max(memory_limit, raised)
    if inp.oom_kills is None:
        reasons.append(
            "OOM kills unknown: no kube_pod_container_status_last_terminated_reason or "
            "kube_pod_container_resource_limits sample for the extender's container (kube-state-metrics)"
        )
    if inp.current is None:
        reasons.append("current resources unknown: kube_pod_container_resource_limits has no sample")
    want = Resources(
        _at_least(cur.cpu_request_m, tier.cpu_request_m),
        _at_least(cur.cpu_limit_m, tier.cpu_limit_m),
        _at_least(cur.memory_request_mi, tier.memory_request_mi),
        memory_limit,
    )
    fields = {
        "requests.cpu": (want.cpu_request_m, cur.cpu_request_m, "m"),
        "limits.cpu": (want.cpu_limit_m, cur.cpu_limit_m, "m"),
        "requests.memory": (want.memory_request_mi, cur.memory_request_mi, "Mi"),
        "limits.memory": (want.memory_limit_mi, cur.memory_limit_mi, "Mi"),
    }
    # Only the fields that change: the values file sets these keys and no other.
    details = {key: f"{w}{unit}" for key, (w, c, unit) in fields.items() if w != c}
    current = inp.current.render() if inp.current is not None else None
    return Recommendation(RESOURCES, want.render(), current, tuple(reasons), evidence, details=details)


@dataclass(frozen=True)
class MonitorInputs:
    gpu_nodes: tuple[str, ...]  # nodes where the scheduler has placed vGPU pods
    reporting_nodes: tuple[str, ...]  # nodes whose monitor reports container series
    skipped_regions: float  # regions the monitors skipped over the window
    current: tuple[str, ...]


def recommend_monitor_args(inp: MonitorInputs, evidence: tuple[Evidence, ...] = ()) -> Recommendation:
    silent = sorted(set(inp.gpu_nodes) - set(inp.reporting_nodes))
    current = " ".join(inp.current) or "[]"
    reasons: list[str] = []
    if silent:
        reasons.append(
            f"nodes {', '.join(silent)} run vGPU pods but their monitor reports no container: "
            "monitor data missing (docs/guides/tuning.md §6.1)"
        )
    if inp.skipped_regions > 0:
        reasons.append(f"the monitors skipped {inp.skipped_regions:g} shared regions in the window")
    if not reasons:
        reasons.append(f"every node with vGPU pods ({len(inp.gpu_nodes)}) has monitor data: keep {current}")
        return Recommendation(MONITOR_ARGS, current, current, tuple(reasons), evidence)
    wanted = tuple(dict.fromkeys((*inp.current, *tables.MONITOR_DEBUG_ARGS)))
    reasons.append(
        f"{' '.join(tables.MONITOR_DEBUG_ARGS)} logs why (kubectl logs on the monitor pods); "
        "take it out again once found"
    )
    details = {"nodes_without_data": ",".join(silent)} if silent else {}
    return Recommendation(MONITOR_ARGS, " ".join(wanted), current, tuple(reasons), evidence, details=details)


def recommend_log_level(current: int, environment: str, source: str) -> Recommendation:
    """No metric measures the hook's logging cost: this rule reads the configured level."""
    reasons = [f"current level {current} ({source})"]
    if environment == "production" and current > tables.LOG_LEVEL_MAX_QUIET:
        value = tables.LOG_LEVEL["production"]
        reasons.append(
            f"CUDA calls slow down when HAMi-core logs above {tables.LOG_LEVEL_MAX_QUIET}: "
            f"{value} in production (docs/guides/tuning.md §6.1, §6.2)"
        )
    else:
        value = current
        reasons.append(f"{environment}: keep it")
    evidence = (Evidence(f"{LOG_LEVEL} in force", float(current), source),)
    return Recommendation(LOG_LEVEL, str(value), str(current), tuple(reasons), evidence)
