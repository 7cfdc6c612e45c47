"""The PromQL behind every input of the recommendations, and the step from query results to inputs.

Queries use raw series (not the recording rules), so the advisor works on any Prometheus that scrapes the
components. Each query names the series it needs; an empty answer is traced back to the missing series.

Section signs (§) refer to docs/guides/tuning.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hami.core import names
from hami.core.duration import parse_prometheus_duration
from hami.core.promapi import QueryFn, Sample
from hami.tune import client, components, cores, recommend, tables
from hami.tune.recommend import Evidence, Recommendation


@dataclass(frozen=True)
class Settings:
    window: str = "7d"
    monitor_job: str = "hami-monitor"
    scheduler_job: str = "hami-scheduler"
    deviceplugin_job: str = "hami-device-plugin"
    node_lock_expire_seconds: float = tables.LOCK_DEFAULT_SECONDS
    environment: str = "production"
    scheduler_container: str = names.EXTENDER_CONTAINER
    # The chart values in force (--values FILE), or the chart's defaults, and which of the two.
    core_policy: str = tables.CHART_CORE_POLICY
    log_level: int = tables.CHART_LOG_LEVEL
    monitor_args: tuple[str, ...] = ()
    values_source: str = "the chart's default"


class InputError(ValueError):
    """The data cannot answer at all (an empty window, unexpected labels); the message says which."""


class _Session:
    """Runs queries, keeps the evidence, and names missing series."""

    def __init__(self, query: QueryFn) -> None:
        self._query = query
        self.evidence: list[Evidence] = []

    def vector(self, expr: str) -> list[Sample]:
        samples = [s for s in self._query(expr) if not math.isnan(s.value)]
        if not samples:
            self.evidence.append(Evidence(expr, None))
        for s in samples:
            label = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            self.evidence.append(Evidence(expr, s.value, label))
        return samples

    def scalar(self, expr: str) -> float | None:
        samples = self.vector(expr)
        return samples[0].value if samples else None

    def missing(self, series: tuple[str, ...]) -> tuple[str, ...]:
        """Which of `series` (selectors) have no sample now; if all exist, they had no data in the window."""
        absent = tuple(s for s in series if not self._query(f"count({s})"))
        return absent or tuple(f"{s} (no samples in the window)" for s in series)

    def take(self) -> tuple[Evidence, ...]:
        out, self.evidence = tuple(self.evidence), []
        return out

    def history(self, series: str, window: str) -> float | None:
        """Seconds of ``series`` Prometheus holds within ``window`` (None: no sample at all)."""
        step = _step(window)
        return self.scalar(f"time() - min(min_over_time(timestamp({series})[{window}:{step}s]))")


def _step(window: str) -> int:
    """Subquery resolution for history checks: about 100 points over the window, 1 to 10 minutes."""
    return min(600, max(60, int(parse_prometheus_duration(window).total_seconds() / 100)))


def _substep(window: str) -> int:
    """Resolution of a max-over-window subquery: at most 5m and never longer than a tenth of the window,
    so a short window still holds points (a 5m step over --window 2m held none)."""
    return max(1, min(300, int(parse_prometheus_duration(window).total_seconds() / 10)))


def _too_short(
    s: _Session, parameter: str, series: str, window: str, start: str | None = None
) -> Recommendation | None:
    """A refusal when the history of ``series`` does not cover ``window`` (one step of slack)."""
    need = parse_prometheus_duration(window).total_seconds()
    have = s.history(series, window)
    if have is None or have + 2 * _step(window) >= need:
        return None
    return recommend.short_history(parameter, series, window, need, have, evidence=s.take(), start=start)


def _kube_client(s: _Session, cfg: Settings) -> Recommendation:
    sch, w = f'job="{cfg.scheduler_job}"', cfg.window
    if short := _too_short(
        s, "--kube-qps/--kube-burst", f"rest_client_requests_total{{{sch}}}", w, tables.START_KUBE_CLIENT
    ):
        return short
    nodes = s.scalar(f"max(sum by (instance) (hami_scheduler_nodes{{{sch}}}))")
    qps = s.scalar(f"max(hami_kube_client_qps{{{sch}}})")
    burst = s.scalar(f"max(hami_kube_client_burst{{{sch}}})")
    wait = s.scalar(
        f"sum(rate(rest_client_rate_limiter_duration_seconds_sum{{{sch}}}[{w}]))"
        f" / sum(rate(rest_client_rate_limiter_duration_seconds_count{{{sch}}}[{w}]))"
    )
    peak = s.scalar(f"max_over_time(sum(rate(rest_client_requests_total{{{sch}}}[5m]))[{w}:{_substep(w)}s])")
    evidence = s.take()
    if nodes is None:
        return recommend.refuse(
            "--kube-qps/--kube-burst",
            s.missing((f"hami_scheduler_nodes{{{sch}}}",)),
            evidence,
            start=tables.START_KUBE_CLIENT,
        )
    inputs = client.ClientInputs(int(nodes), qps, burst, wait, peak)
    return client.recommend_kube_client(inputs, evidence)


def _memory_scaling(s: _Session, cfg: Settings) -> Recommendation:
    mon, w = f'job="{cfg.monitor_job}"', cfg.window
    if short := _too_short(
        s, "deviceMemoryScaling", f"hami_vgpu_memory_used_bytes{{{mon}}}", w, tables.START_MEMORY_SCALING
    ):
        return short
    requested = s.vector(f"sum by (node) (hami_vgpu_memory_limit_bytes{{{mon}}})")
    peak = s.vector(
        f"sum by (node) (max_over_time(hami_vgpu_memory_used_bytes{{{mon}}}[{w}])"
        f" and hami_vgpu_memory_limit_bytes{{{mon}}})"
    )
    scaling = s.vector(f'max by (node) (hami_device_memory_scaling{{job="{cfg.deviceplugin_job}"}})')
    physical = s.vector(
        f"max by (node) (max_over_time((hami_host_gpu_memory_used_bytes{{{mon}}}"
        f" / on (node, device_uuid) group_left () (hami_host_gpu_memory_total_bytes{{{mon}}} > 0))"
        f"[{w}:{_substep(w)}s]))"
    )
    history = s.history(f"hami_vgpu_memory_limit_bytes{{{mon}}}", w)
    evidence = s.take()
    if not requested or not peak:
        needed = (f"hami_vgpu_memory_limit_bytes{{{mon}}}", f"hami_vgpu_memory_used_bytes{{{mon}}}")
        return recommend.refuse(
            "deviceMemoryScaling", s.missing(needed), evidence, start=tables.START_MEMORY_SCALING
        )
    by_node = {smp.labels.get("node", ""): smp.value for smp in peak}
    cur = {smp.labels.get("node", ""): smp.value for smp in scaling}
    phys = {smp.labels.get("node", ""): smp.value for smp in physical}
    nodes = [
        recommend.NodeMemory(node, r.value, by_node.get(node, 0.0), cur.get(node), phys.get(node))
        for r in requested
        for node in [r.labels.get("node", "")]
    ]
    return recommend.recommend_memory_scaling(nodes, evidence, history)


def _split_count(s: _Session, cfg: Settings) -> Recommendation:
    mon, sch, w = f'job="{cfg.monitor_job}"', f'job="{cfg.scheduler_job}"', cfg.window
    if short := _too_short(
        s, "deviceSplitCount", f"hami_vgpu_memory_limit_bytes{{{mon}}}", w, tables.START_SPLIT_COUNT
    ):
        return short
    smallest = s.scalar(f"min(min_over_time(hami_vgpu_memory_limit_bytes{{{mon}}}[{w}]))")
    nodes = s.scalar(f"max(sum by (instance) (hami_scheduler_nodes{{{sch}}}))")
    current = s.scalar(f"max(hami_gpu_split_limit{{{sch}}})")
    pending = s.scalar(
        f"max_over_time(sum(max by (namespace, reason) (hami_scheduler_pending_pods{{{sch}}}))[1h:1m])"
    )
    saturated = s.scalar(
        f"count(max by (node, device_uuid) (hami_gpu_shared_count{{{sch}}})"
        f" >= on (node, device_uuid) max by (node, device_uuid) (hami_gpu_split_limit{{{sch}}}))"
        # 0 only where both series are there to compare; neither: unknown, which blocks the raises
        f" or (count(hami_gpu_shared_count{{{sch}}}) and count(hami_gpu_split_limit{{{sch}}})) * 0"
    )
    utilisation = s.scalar(f"avg(avg_over_time(hami_host_gpu_utilization_ratio{{{mon}}}[{w}]))")
    evidence = s.take()
    if smallest is None:
        return recommend.refuse(
            "deviceSplitCount",
            s.missing((f"hami_vgpu_memory_limit_bytes{{{mon}}}",)),
            evidence,
            start=tables.START_SPLIT_COUNT,
        )
    inputs = recommend.SplitInputs(
        smallest,
        None if nodes is None else int(nodes),
        None if current is None else int(current),
        pending,
        saturated,
        utilisation,
    )
    return recommend.recommend_split_count(inputs, evidence)


def _node_lock(s: _Session, cfg: Settings) -> Recommendation:
    sch, w = f'job="{cfg.scheduler_job}"', cfg.window
    series = f"hami_scheduler_bind_duration_seconds_bucket{{{sch}}}"
    if short := _too_short(s, "nodeLockExpire", series, w, tables.START_NODE_LOCK):
        return short
    expired = s.scalar(f"sum(increase(hami_scheduler_node_lock_expired_total{{{sch}}}[{w}]))")
    bind = s.scalar(
        f"histogram_quantile(0.99, sum by (le) "
        f"(rate(hami_scheduler_bind_duration_seconds_bucket{{{sch}}}[{w}])))"
    )
    wait = s.scalar(
        f"histogram_quantile(0.99, sum by (le) "
        f"(rate(hami_scheduler_node_lock_wait_seconds_bucket{{{sch}}}[{w}])))"
    )
    configured = s.scalar(f"max(hami_scheduler_node_lock_timeout_seconds{{{sch}}})")
    if configured is None:
        # an extender older than the gauge, or not scraped: trust the operator's flag, and say so
        current = cfg.node_lock_expire_seconds
        s.evidence.append(
            Evidence(
                "--node-lock-expire",
                current,
                f"fallback: hami_scheduler_node_lock_timeout_seconds{{{sch}}} has no sample",
            )
        )
    else:
        current = configured
    evidence = s.take()
    needed = {
        f"hami_scheduler_node_lock_expired_total{{{sch}}}": expired,
        f"hami_scheduler_bind_duration_seconds_bucket{{{sch}}}": bind,
        f"hami_scheduler_node_lock_wait_seconds_bucket{{{sch}}}": wait,
    }
    lacking = tuple(name for name, v in needed.items() if v is None)
    if expired is None or bind is None or wait is None:
        return recommend.refuse("nodeLockExpire", s.missing(lacking), evidence, start=tables.START_NODE_LOCK)
    inputs = recommend.LockInputs(current, expired, bind, wait)
    return recommend.recommend_node_lock_expire(inputs, evidence)


def core_quantile_expr(selector: str, window: str) -> str:
    """§5's SM-use distribution: a quantile over time of the gauge (histogram_quantile needs buckets)."""
    return f"quantile_over_time({tables.CORE_QUANTILE}, hami_vgpu_core_used_percent{{{selector}}}[{window}])"


def _by_container(samples: list[Sample]) -> dict[str, float]:
    """Highest value per namespace/pod/container (a container on several devices has one gpucores)."""
    out: dict[str, float] = {}
    for smp in samples:
        key = "/".join(smp.labels.get(k, "") for k in ("namespace", "pod", "container"))
        out[key] = max(out.get(key, smp.value), smp.value)
    return out


def _cores(s: _Session, cfg: Settings) -> list[Recommendation]:
    mon, w = f'job="{cfg.monitor_job}"', cfg.window
    policy_start = (
        f"{tables.CORE_POLICY[cfg.environment]} (the {cfg.environment} template, "
        "docs/guides/tuning.md §6.2)"
    )
    series = f"hami_vgpu_core_used_percent{{{mon}}}"
    if short := _too_short(s, cores.POLICY, series, w, policy_start):
        return [short, replace(short, parameter=cores.GPUCORES, start=None)]
    used = _by_container(s.vector(core_quantile_expr(mon, w)))
    limits = _by_container(s.vector(f"max_over_time(hami_vgpu_core_limit_percent{{{mon}}}[{w}]) > 0"))
    evidence = s.take()
    containers = [cores.ContainerCores(k, used[k], limits[k]) for k in sorted(used.keys() & limits.keys())]
    if not containers:
        missing = s.missing((series, f"hami_vgpu_core_limit_percent{{{mon}}}"))
        return [
            recommend.refuse(cores.POLICY, missing, evidence, start=policy_start),
            recommend.refuse(cores.GPUCORES, missing, evidence),
        ]
    return [
        cores.recommend_policy(containers, cfg.environment, cfg.core_policy, evidence),
        cores.recommend_gpucores(containers, evidence),
    ]


def _millis(v: float | None) -> int | None:
    return None if v is None else round(v * 1000)


def _mebis(v: float | None) -> int | None:
    return None if v is None else round(v / components.MIB)


def _scheduler_resources(s: _Session, cfg: Settings) -> Recommendation:
    sch, w, ctr = f'job="{cfg.scheduler_job}"', cfg.window, f'container="{cfg.scheduler_container}"'
    nodes = s.scalar(f"max(sum by (instance) (hami_scheduler_nodes{{{sch}}}))")
    have: dict[str, dict[str, float]] = {}
    for kind in ("requests", "limits"):
        expr = f"max by (resource) (kube_pod_container_resource_{kind}{{{ctr}}})"
        have[kind] = {smp.labels.get("resource", ""): smp.value for smp in s.vector(expr)}
    oom = s.scalar(
        "sum(max by (namespace, pod) (max_over_time("
        f'kube_pod_container_status_last_terminated_reason{{{ctr}, reason="OOMKilled"}}[{w}])))'
        # kube-state-metrics has the series only after a restart: reporting the container is reporting 0
        f" or count(kube_pod_container_resource_limits{{{ctr}}}) * 0"
    )
    working_set = s.scalar(f"max(max_over_time(container_memory_working_set_bytes{{{ctr}}}[{w}]))")
    evidence = s.take()
    if nodes is None:
        return recommend.refuse(
            components.RESOURCES,
            s.missing((f"hami_scheduler_nodes{{{sch}}}",)),
            evidence,
            start=tables.START_SCHEDULER_RESOURCES,
        )
    current = None
    if have["requests"] or have["limits"]:
        req, lim = have["requests"], have["limits"]
        current = components.Resources(
            _millis(req.get("cpu")),
            _millis(lim.get("cpu")),
            _mebis(req.get("memory")),
            _mebis(lim.get("memory")),
        )
    inputs = components.SchedulerInputs(int(nodes), current, oom, working_set)
    return components.recommend_scheduler_resources(inputs, evidence)


def _monitor_args(s: _Session, cfg: Settings) -> Recommendation:
    mon, sch, w = f'job="{cfg.monitor_job}"', f'job="{cfg.scheduler_job}"', cfg.window
    placed = s.vector(f"count by (node) (max by (node, device_uuid) (hami_gpu_shared_count{{{sch}}}) > 0)")
    reporting = s.vector(f"count by (node) (hami_vgpu_memory_limit_bytes{{{mon}}})")
    skipped = s.scalar(f"sum(increase(hami_monitor_region_skips_total{{{mon}}}[{w}]))")
    known = s.scalar(f"count(hami_gpu_shared_count{{{sch}}})")
    evidence = s.take()
    if known is None:  # without the scheduler's placements there is nothing to miss
        return recommend.refuse(components.MONITOR_ARGS, (f"hami_gpu_shared_count{{{sch}}}",), evidence)
    inputs = components.MonitorInputs(
        tuple(smp.labels.get("node", "") for smp in placed),
        tuple(smp.labels.get("node", "") for smp in reporting),
        skipped or 0.0,
        cfg.monitor_args,
    )
    return components.recommend_monitor_args(inputs, evidence)


def preflight(query: QueryFn, cfg: Settings) -> None:
    """Raise InputError when the window holds no HAMi sample at all, or a series lacks a join label."""
    mon, sch, w = f'job="{cfg.monitor_job}"', f'job="{cfg.scheduler_job}"', cfg.window
    probes = (f"hami_vgpu_memory_limit_bytes{{{mon}}}", f"hami_scheduler_nodes{{{sch}}}")
    if not any(query(f"count(count_over_time({p}[{w}]))") for p in probes):
        raise InputError(
            f"no samples of {' or '.join(probes)} in the --window {w} ending at the evaluation time: "
            "check --time, --window and the --monitor-job/--scheduler-job names"
        )
    needs = {
        f"hami_vgpu_memory_limit_bytes{{{mon}}}": ("node", "namespace", "pod", "container"),
        f"hami_vgpu_core_used_percent{{{mon}}}": ("node", "namespace", "pod", "container"),
        f"hami_gpu_shared_count{{{sch}}}": ("node", "device_uuid"),
    }
    for series, labels in needs.items():
        for label in labels:
            if query(f'count({series[:-1]}, {label}=""}})'):
                raise InputError(
                    f"{series} has series without a {label} label: hami-tune joins on "
                    f"{', '.join(labels)}; keep the exporters' labels when scraping (honor_labels: true)"
                )


def recommend_all(query: QueryFn, cfg: Settings) -> list[Recommendation]:
    session = _Session(query)
    return [
        _memory_scaling(session, cfg),
        _split_count(session, cfg),
        _kube_client(session, cfg),
        _node_lock(session, cfg),
        *_cores(session, cfg),
        components.recommend_log_level(cfg.log_level, cfg.environment, cfg.values_source),
        _scheduler_resources(session, cfg),
        _monitor_args(session, cfg),
    ]
