"""nodeLockExpire's current value comes from hami_scheduler_node_lock_timeout_seconds when the extender
exports it, and from --node-lock-expire otherwise (said in the evidence).

Section signs (§) refer to docs/guides/tuning.md.
"""

from __future__ import annotations

from hami.core.promapi import Sample
from hami.tune.collect import Settings, recommend_all
from hami.tune.recommend import Recommendation

SCH = 'job="hami-scheduler"'


def answers(timeout: float | None) -> dict[str, float]:
    """Two expired locks over the window, fast binds and short waits (the §6.1 'shorten' case)."""
    p99 = "histogram_quantile(0.99, sum by (le) (rate({}_bucket{{" + SCH + "}}[7d])))"
    out = {
        f"sum(increase(hami_scheduler_node_lock_expired_total{{{SCH}}}[7d]))": 2.0,
        p99.format("hami_scheduler_bind_duration_seconds"): 0.4,
        p99.format("hami_scheduler_node_lock_wait_seconds"): 0.2,
    }
    if timeout is not None:
        out[f"max(hami_scheduler_node_lock_timeout_seconds{{{SCH}}})"] = timeout
    return out


def node_lock(timeout: float | None, flag: float = 300.0) -> Recommendation:
    table = answers(timeout)

    def query(expr: str) -> list[Sample]:
        return [Sample({}, table[expr])] if expr in table else []

    recs = recommend_all(query, Settings(node_lock_expire_seconds=flag))
    return next(r for r in recs if r.parameter == "nodeLockExpire")


def test_exported_timeout_is_the_current_value() -> None:
    rec = node_lock(timeout=600.0, flag=300.0)
    assert (rec.value, rec.current) == ("3m0s", "10m0s")
    queries = [e.query for e in rec.evidence]
    assert f"max(hami_scheduler_node_lock_timeout_seconds{{{SCH}}})" in queries
    assert "--node-lock-expire" not in queries


def test_flag_is_the_fallback_and_the_evidence_says_so() -> None:
    rec = node_lock(timeout=None, flag=240.0)
    assert rec.current == "4m0s"
    fallback = [e for e in rec.evidence if e.query == "--node-lock-expire"]
    assert len(fallback) == 1 and fallback[0].value == 240.0
    assert "hami_scheduler_node_lock_timeout_seconds" in fallback[0].label
    assert "fallback" in fallback[0].label
