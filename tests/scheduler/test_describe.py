"""The extender's metric descriptors (docs/metrics.md's source) match what a running extender serves."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hami.scheduler.extender.collector import describe
from hami.testing.extender import metrics_text, running
from hami.testing.kubeapi import KubeAPIServer


@pytest.mark.parametrize("legacy", [False, True])
def test_describe_matches_a_running_extender(kube_api: KubeAPIServer, legacy: bool) -> None:
    with running(kube_api, legacy_metrics=legacy) as ext:
        text = metrics_text(ext)
    exposed = {
        f.name + ("_total" if f.type == "counter" else "")
        for f in text_string_to_metric_families(text)
        if not f.name.startswith(("process_", "python_")) and not f.name.endswith("_created")
    }
    assert exposed == {d.name for d in describe(legacy)}


def test_legacy_names_only_with_legacy() -> None:
    plain = {d.name for d in describe(False)}
    legacy = {d.name for d in describe(True)}
    assert plain < legacy
    assert {"GPUDeviceMemoryLimit", "vGPUCoreAllocated", "QuotaUsed"} <= legacy - plain
    lock = next(d for d in describe() if d.name == "hami_scheduler_node_lock_timeout_seconds")
    assert (lock.type, lock.labels) == ("gauge", ())
