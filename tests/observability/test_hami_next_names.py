"""The metric names HAMi merged on its master after v2.10 (its next release carries them), with the
name, type and labels it gives them: in the monitor and in the scheduler extender. The values are
checked where they move (tests/scheduler/test_allocation_counters.py, the exporter's golden files)."""

from __future__ import annotations

import pytest

from hami.exporter import collector as monitor
from hami.scheduler.extender import collector as scheduler

# name -> (type, labels the family may carry beyond the common ones)
MONITOR = {
    "hami_host_gpu_power_usage_watts": ("gauge", set()),
    "hami_host_gpu_ecc_errors_total": ("counter", {"error_type"}),
}
SCHEDULER = {
    "hami_scheduler_is_leader": ("gauge", set()),
    "hami_scheduler_cache_synced": ("gauge", set()),
    "hami_scheduler_allocations_total": ("counter", {"device_type"}),
    "hami_scheduler_allocation_failures_total": ("counter", {"device_type", "failure_reason"}),
    "hami_scheduler_bind_rollbacks_total": ("counter", {"phase"}),
    "hami_scheduler_stale_reservations_total": ("counter", {"device_type"}),
    "hami_scheduler_reconciliation_errors_total": ("counter", {"phase"}),
}
BOUNDED = {"phase", "device_type", "failure_reason"}  # what HAMi bounds the new counters' labels to
HOST = {"node", "device_index", "device_uuid", "device_type", "zone"}


@pytest.mark.parametrize("name", sorted(MONITOR))
def test_monitor_exports_the_next_release_names(name: str) -> None:
    found = {d.name: d for d in monitor.describe(False)}
    assert name in found, f"{name} missing from the monitor"
    kind, extra = MONITOR[name]
    assert found[name].type == kind
    assert set(found[name].labels) == HOST | extra


@pytest.mark.parametrize("name", sorted(SCHEDULER))
def test_scheduler_exports_the_next_release_names(name: str) -> None:
    found = {d.name: d for d in scheduler.describe(False)}
    assert name in found, f"{name} missing from the scheduler extender"
    kind, labels = SCHEDULER[name]
    assert found[name].type == kind
    assert set(found[name].labels) == labels
    if name.endswith("_total"):
        assert set(found[name].labels) <= BOUNDED
