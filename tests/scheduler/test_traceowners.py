"""The extender's memory of which pod a trace belongs to (docs/design/tracing.md §3), alone."""

from __future__ import annotations

from typing import Any

from hami.core import tracing
from hami.scheduler.extender.traceowners import TraceOwners


def _pod(uid: str, trace: str) -> dict[str, Any]:
    value = f"00-{trace}-{'b' * 16}-01;{'0' * 32}"  # unverified here: only the trace ID is indexed
    return {"metadata": {"uid": uid, "namespace": "ns", "annotations": {tracing.ANNOTATION: value}}}


def test_a_trace_is_its_first_pods_until_forgotten() -> None:
    owners = TraceOwners(remembered=2)
    a, b = _pod("a", "1" * 32), _pod("b", "1" * 32)
    owners.seen(a)
    assert owners.admit(a, "1" * 32)
    owners.seen(b)
    assert not owners.admit(b, "1" * 32) and owners.admit(a, "1" * 32)
    owners.gone(a)
    owners.gone(b)
    for trace in ("2" * 32, "3" * 32):  # two later traces push the first out of a memory of two
        assert owners.admit(_pod(trace[0], trace), trace)
    assert owners.admit(b, "1" * 32)  # forgotten, and no cached pod carries it


def test_a_pod_that_stops_carrying_a_trace_no_longer_blocks_it() -> None:
    owners = TraceOwners()
    a, b = _pod("a", "1" * 32), _pod("b", "1" * 32)
    owners.seen(a)
    owners.seen(b)
    owners.seen(_pod("a", "2" * 32))  # a's annotation changed
    assert owners.admit(b, "1" * 32)
