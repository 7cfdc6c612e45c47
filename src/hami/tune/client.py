"""--kube-qps / --kube-burst (docs/guides/tuning.md §2.1, §6.1): the cluster-size tier, one step up when
the extender's client is throttled or busy, and never lowered past what was not measured."""

from __future__ import annotations

from dataclasses import dataclass

from hami.tune import tables
from hami.tune.recommend import Evidence, Recommendation


def client_tier(nodes: int) -> int:
    """Index into CLIENT_TIERS of the cluster-size row for `nodes` (the lower end of a range)."""
    index = 0
    for i, tier in enumerate(tables.CLIENT_TIERS):
        if nodes >= tier.min_nodes and tier.min_nodes > tables.CLIENT_TIERS[index].min_nodes:
            index = i
    return index


@dataclass(frozen=True)
class ClientInputs:
    nodes: int
    current_qps: float | None
    current_burst: float | None
    mean_wait_seconds: float | None  # mean client-side rate-limiter wait over the window
    peak_request_rate: float | None  # highest 5m request rate over the window


def recommend_kube_client(inp: ClientInputs, evidence: tuple[Evidence, ...] = ()) -> Recommendation:
    index = client_tier(inp.nodes)
    reasons = [f"{inp.nodes} nodes: tier {tables.CLIENT_TIERS[index].name} (docs/guides/tuning.md §2.1)"]
    throttled = (
        inp.mean_wait_seconds is not None and inp.mean_wait_seconds > tables.CLIENT_THROTTLED_WAIT_SECONDS
    )
    if throttled:
        reasons.append(
            f"requests wait {inp.mean_wait_seconds:.3f}s on average in the client rate limiter "
            f"(> {tables.CLIENT_THROTTLED_WAIT_SECONDS}s): one step up"
        )
        index = min(index + 1, len(tables.CLIENT_TIERS) - 1)
    tier = tables.CLIENT_TIERS[index]
    if inp.peak_request_rate is not None and inp.peak_request_rate > tables.CLIENT_HEADROOM * tier.qps:
        reasons.append(
            f"peak request rate {inp.peak_request_rate:.2f}/s exceeds {tables.CLIENT_HEADROOM:.0%} of "
            f"QPS {tier.qps:g}: one step up"
        )
        index = min(index + 1, len(tables.CLIENT_TIERS) - 1)
        tier = tables.CLIENT_TIERS[index]
    current = None
    if inp.current_qps is not None and inp.current_burst is not None:
        current = f"--kube-qps={inp.current_qps:g} --kube-burst={inp.current_burst:g}"
    # Lowering the client's budget is safe only where throttling and the peak rate were measured.
    unmeasured = [
        what
        for what, v in (
            ("rest_client_rate_limiter_duration_seconds (throttling)", inp.mean_wait_seconds),
            ("rest_client_requests_total (peak request rate)", inp.peak_request_rate),
        )
        if v is None
    ]
    if current is not None and unmeasured and tier.qps < (inp.current_qps or 0):
        reasons.append(
            f"lowering blocked: no data for {' and '.join(unmeasured)} in the window, so a smaller "
            f"budget could throttle the extender unseen; keep {current}"
        )
        return Recommendation(
            "--kube-qps/--kube-burst", current, current, tuple(reasons), evidence, missing=tuple(unmeasured)
        )
    return Recommendation(
        "--kube-qps/--kube-burst",
        f"--kube-qps={tier.qps:g} --kube-burst={tier.burst}",
        current=current,
        reasons=tuple(reasons),
        evidence=evidence,
        details={
            "kube_qps": f"{tier.qps:g}",
            "kube_burst": str(tier.burst),
            "kube_timeout": str(tier.timeout_seconds),
        },
    )
