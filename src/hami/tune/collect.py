"""The PromQL behind every input of the recommendations, and the step from query results to inputs.

Queries use raw series (not the recording rules), so the advisor works on any Prometheus that scrapes the
components. Each query names the series it needs; an empty answer is traced back to the missing series.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from hami.core.duration import parse_prometheus_duration
from hami.tune import recommend, tables
from hami.tune.recommend import Evidence, Recommendation


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


QueryFn = Callable[[str], list[Sample]]


@dataclass(frozen=True)
class Settings:
    window: str = "7d"
    monitor_job: str = "hami-monitor"
    scheduler_job: str = "hami-scheduler"
    deviceplugin_job: str = "hami-device-plugin"
    node_lock_expire_seconds: float = tables.LOCK_DEFAULT_SECONDS


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


def _too_short(s: _Session, parameter: str, series: str, window: str) -> Recommendation | None:
    """A refusal when the history of ``series`` does not cover ``window`` (one step of slack)."""
    need = parse_prometheus_duration(window).total_seconds()
    have = s.history(series, window)
    if have is None or have + 2 * _step(window) >= need:
        return None
    return recommend.short_history(parameter, series, window, need, have, evidence=s.take())


def _kube_client(s: _Session, cfg: Settings) -> Recommendation:
    sch, w = f'job="{cfg.scheduler_job}"', cfg.window
    if short := _too_short(s, "--kube-qps/--kube-burst", f"rest_client_requests_total{{{sch}}}", w):
        return short
    nodes = s.scalar(f"max(sum by (instance) (hami_scheduler_nodes{{{sch}}}))")
    qps = s.scalar(f"max(hami_kube_client_qps{{{sch}}})")
    burst = s.scalar(f"max(hami_kube_client_burst{{{sch}}})")
    wait = s.scalar(
        f"sum(rate(rest_client_rate_limiter_duration_seconds_sum{{{sch}}}[{w}]))"
        f" / sum(rate(rest_client_rate_limiter_duration_seconds_count{{{sch}}}[{w}]))"
    )
    peak = s.scalar(f"max_over_time(sum(rate(rest_client_requests_total{{{sch}}}[5m]))[{w}:5m])")
    evidence = s.take()
    if nodes is None:
        return recommend.refuse(
            "--kube-qps/--kube-burst", s.missing((f"hami_scheduler_nodes{{{sch}}}",)), evidence
        )
    inputs = recommend.ClientInputs(int(nodes), qps, burst, wait, peak)
    return recommend.recommend_kube_client(inputs, evidence)


def _memory_scaling(s: _Session, cfg: Settings) -> Recommendation:
    mon, w = f'job="{cfg.monitor_job}"', cfg.window
    if short := _too_short(s, "deviceMemoryScaling", f"hami_vgpu_memory_used_bytes{{{mon}}}", w):
        return short
    requested = s.vector(f"sum by (node) (hami_vgpu_memory_limit_bytes{{{mon}}})")
    peak = s.vector(
        f"sum by (node) (max_over_time(hami_vgpu_memory_used_bytes{{{mon}}}[{w}])"
        f" and hami_vgpu_memory_limit_bytes{{{mon}}})"
    )
    scaling = s.vector(f'max by (node) (hami_device_memory_scaling{{job="{cfg.deviceplugin_job}"}})')
    physical = s.vector(
        f"max by (node) (max_over_time((hami_host_gpu_memory_used_bytes{{{mon}}}"
        f" / on (node, device_uuid) group_left () (hami_host_gpu_memory_total_bytes{{{mon}}} > 0))[{w}:5m]))"
    )
    history = s.history(f"hami_vgpu_memory_limit_bytes{{{mon}}}", w)
    evidence = s.take()
    if not requested or not peak:
        needed = (f"hami_vgpu_memory_limit_bytes{{{mon}}}", f"hami_vgpu_memory_used_bytes{{{mon}}}")
        return recommend.refuse("deviceMemoryScaling", s.missing(needed), evidence)
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
    if short := _too_short(s, "deviceSplitCount", f"hami_vgpu_memory_limit_bytes{{{mon}}}", w):
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
        f" or vector(0)"
    )
    evidence = s.take()
    if smallest is None:
        return recommend.refuse(
            "deviceSplitCount", s.missing((f"hami_vgpu_memory_limit_bytes{{{mon}}}",)), evidence
        )
    inputs = recommend.SplitInputs(
        smallest,
        None if nodes is None else int(nodes),
        None if current is None else int(current),
        pending,
        saturated,
    )
    return recommend.recommend_split_count(inputs, evidence)


def _node_lock(s: _Session, cfg: Settings) -> Recommendation:
    sch, w = f'job="{cfg.scheduler_job}"', cfg.window
    series = f"hami_scheduler_bind_duration_seconds_bucket{{{sch}}}"
    if short := _too_short(s, "nodeLockExpire", series, w):
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
        return recommend.refuse("nodeLockExpire", s.missing(lacking), evidence)
    inputs = recommend.LockInputs(current, expired, bind, wait)
    return recommend.recommend_node_lock_expire(inputs, evidence)


def recommend_all(query: QueryFn, cfg: Settings) -> list[Recommendation]:
    session = _Session(query)
    return [
        _memory_scaling(session, cfg),
        _split_count(session, cfg),
        _kube_client(session, cfg),
        _node_lock(session, cfg),
    ]
