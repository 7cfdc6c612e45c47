"""Vectors pinning what the differential run against HAMi's own scheduler (tests/integration/
test_vs_hami.py) found different on purpose; each has its row in docs/design/differences.md."""

from __future__ import annotations

from hami.core import reasons as r
from hami.scheduler.engine.decision import FilterConfig, filter_pod
from hami.scheduler.engine.device_config import NvidiaConfig
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.requests import pod_request
from hami.scheduler.engine.usage import UsageIndex
from hami.testing.builders import dev, pod, res, resource_quota
from hami.testing.engineinputs import node_state

L4 = 23034


def test_app_containers_quota_check_counts_the_init_containers() -> None:
    """Row "In-Fit quota check with init containers". An init container takes a whole L4 (no
    gpumem: 100 %), the app container two cards with 1024 MiB each; the namespace may hold 24000 MiB.
    The reservation is 23034 + 1024 = 24058 MiB (init: the max per card, app: the sum). HAMi checks
    the app container against the app containers fitted so far only (2048 MiB), places the pod and
    takes the namespace past its quota; we refuse it."""
    cfg = FilterConfig()
    quotas = QuotaManager(NvidiaConfig())
    quotas.add_quota(resource_quota("default", gpumem="24000"))
    node = node_state("two", dev("g0", L4), dev("g1", L4, index=1))
    request = pod_request(pod(res(2, 1024, 30), init=[res(1, None, 25)]), NvidiaConfig())
    assert request is not None
    got = filter_pod(request, [node], UsageIndex(), quotas, cfg)
    assert got.node is None
    assert r.RESOURCE_QUOTA_NOT_FIT in got.failed["two"]
    # without the init container the same app container fits: the init container's share decides
    alone = pod_request(pod(res(2, 1024, 30)), NvidiaConfig())
    assert alone is not None
    assert filter_pod(alone, [node], UsageIndex(), quotas, cfg).node == "two"
