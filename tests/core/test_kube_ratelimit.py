"""client-go token-bucket semantics, on a fake clock (no real waiting)."""

from __future__ import annotations

import threading

import pytest

from hami.core.kube.ratelimit import RateLimitTimeout, TokenBucket, effective_limits
from tests.core.clock import FakeClock


def test_bucket_starts_full_and_burst_goes_out_at_once() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=5, burst=10, clock=clock)
    assert [bucket.try_accept() for _ in range(10)] == [True] * 10
    assert bucket.try_accept() is False
    assert clock.slept == []


def test_refill_is_continuous_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=5, burst=10, clock=clock)
    for _ in range(10):
        assert bucket.try_accept()
    clock.advance(0.1)  # half a token at 5/s
    assert bucket.try_accept() is False
    clock.advance(0.1)  # now one whole token
    assert bucket.try_accept() is True
    assert bucket.try_accept() is False


def test_refill_never_exceeds_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=100, burst=3, clock=clock)
    clock.advance(3600)
    assert bucket.tokens() == pytest.approx(3.0)
    assert [bucket.try_accept() for _ in range(4)] == [True, True, True, False]


def test_wait_reserves_future_tokens_in_arrival_order() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=2, burst=1, clock=clock)
    assert bucket.wait() == 0.0
    # Without time passing, each further caller queues half a second behind the previous one.
    assert bucket.wait() == pytest.approx(0.5)
    assert bucket.wait() == pytest.approx(1.0)
    assert clock.slept == pytest.approx([0.5, 1.0])
    assert bucket.tokens() == pytest.approx(-2.0)
    # Reserved tokens are paid back by the refill before anyone else gets one.
    clock.advance(1.0)
    assert bucket.try_accept() is False
    clock.advance(0.5)
    assert bucket.try_accept() is True


def test_long_run_rate_is_qps_after_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=50, burst=100, clock=clock)
    waits = [bucket.wait() for _ in range(600)]
    # 100 free, then 500 more at 50/s: the last one waits 10 s.
    assert waits[:100] == [0.0] * 100
    assert waits[-1] == pytest.approx(10.0)


def test_wait_with_deadline_fails_without_consuming() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=1, burst=1, clock=clock)
    assert bucket.try_accept()
    with pytest.raises(RateLimitTimeout, match="would exceed context deadline"):
        bucket.wait(timeout=0.5)
    assert bucket.tokens() == pytest.approx(0.0)
    assert bucket.wait(timeout=1.0) == pytest.approx(1.0)


def test_clock_stepping_back_earns_nothing() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=1, clock=clock)
    assert bucket.try_accept()
    clock.advance(-50)
    assert bucket.try_accept() is False


def test_concurrent_waiters_get_distinct_slots() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=2, clock=clock)
    results: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        delay = bucket.wait()
        with lock:
            results.append(delay)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sorted(results) == pytest.approx([0.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6])


@pytest.mark.parametrize(
    ("qps", "burst", "expected"),
    [
        (5.0, 10, (5.0, 10)),
        (0.0, 0, (5.0, 10)),  # zero values mean client-go's defaults
        (50.0, 0, (50.0, 10)),
        (0.0, 100, (5.0, 100)),
        (-1.0, 10, None),  # negative QPS: no client-side limiter
        (-1.0, -5, None),
    ],
)
def test_effective_limits_follow_rest_config(
    qps: float, burst: int, expected: tuple[float, int] | None
) -> None:
    assert effective_limits(qps, burst) == expected


def test_negative_burst_with_positive_qps_is_refused() -> None:
    with pytest.raises(ValueError, match="burst"):
        effective_limits(5.0, -1)


@pytest.mark.parametrize(("qps", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_bucket_rejects_degenerate_parameters(qps: float, burst: int) -> None:
    with pytest.raises(ValueError):
        TokenBucket(qps, burst)
