"""HAMi's §7.1 allocation metrics on a live scrape (current and ``--legacy-metrics`` names), and
``promtool check metrics`` over a live scrape.

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hami.scheduler.extender import events
from hami.scheduler.extender.daemon import Extender
from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.extender import bind_pod, create_pod, filter_pod, metrics_text, running
from hami.testing.kubeapi import KubeAPIServer

MIB = 1048576
PROMTOOL = "/usr/bin/promtool"


@pytest.fixture
def legacy(kube_api: KubeAPIServer) -> Iterator[tuple[Extender, str]]:
    """One node (2 × 8000 MiB T4), a 10000 MiB quota, one pod holding 3000 MiB and 30 % cores."""
    kube_api.store.put(gpu_node("n1"))
    kube_api.store.put(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpu", "namespace": "default"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "10000"}},
        }
    )
    with running(kube_api, legacy_metrics=True) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p1", mem=3000, cores=30))
        reply = filter_pod(ext, pod, ["n1"])
        assert reply["NodeNames"] == ["n1"]
        assert bind_pod(ext, pod, "n1") == ""
        stored = kube_api.store.get("pods", "p1", "default")
        assert stored is not None
        uuid = stored["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"].split(",")[0]
        yield ext, uuid


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    assert key in samples, f"{name}{labels} not scraped; have " + str(
        sorted(dict(k[1]) for k in samples if k[0] == name)
    )
    return samples[key]


def test_hami_allocation_metrics_names_labels_and_values(legacy: tuple[Extender, str]) -> None:
    ext, uuid = legacy
    idx = uuid.rsplit("-", 1)[1]
    other = f"GPU-n1-{1 - int(idx)}"
    s = _samples(metrics_text(ext))
    dev = {
        "node": "n1",
        "device_uuid": uuid,
        "device_index": idx,
        "device_type": "NVIDIA-Tesla T4",
        "zone": "vGPU",
    }
    assert _value(s, "hami_gpu_memory_limit_bytes", **dev) == 8000 * MIB
    assert _value(s, "hami_gpu_core_limit_ratio", **dev) == 100
    assert _value(s, "hami_gpu_memory_allocated_bytes", device_cores="100", **dev) == 3000 * MIB
    assert _value(s, "hami_gpu_shared_count", **dev) == 1
    assert _value(s, "hami_gpu_core_allocated_ratio", **dev) == 30
    assert (
        _value(s, "hami_node_gpu_overview", device_cores="100", device_memory_limit="8000", **dev)
        == 3000 * MIB
    )
    assert _value(s, "hami_node_gpu_memory_allocated_ratio", **dev) == 3000 / 8000
    assert (
        _value(s, "hami_gpu_shared_count", **{**dev, "device_uuid": other, "device_index": str(1 - int(idx))})
        == 0
    )
    q = {"namespace": "default", "zone": "vGPU"}
    assert _value(s, "hami_resource_quota_used", quota_name="nvidia.com/gpumem", limit="10000", **q) == 3000
    assert _value(s, "hami_resource_quota_used", quota_name="nvidia.com/gpucores", limit="0", **q) == 30
    assert _value(s, "hami_resource_quota_limit", quota_name="nvidia.com/gpumem", **q) == 10000
    assert (
        "hami_resource_quota_limit",
        frozenset({**q, "quota_name": "nvidia.com/gpucores"}.items()),
    ) not in s
    pod = {"namespace": "default", "node": "n1", "pod": "p1", "container_index": "0", "device_uuid": uuid}
    assert _value(s, "hami_vgpu_memory_allocated_bytes", zone="vGPU", **pod) == 3000 * MIB
    assert _value(s, "hami_vgpu_core_allocated_ratio", zone="vGPU", **pod) == 30


def test_legacy_metrics_names_labels_and_values(legacy: tuple[Extender, str]) -> None:
    ext, uuid = legacy
    idx = uuid.rsplit("-", 1)[1]
    s = _samples(metrics_text(ext))
    dev = {"nodeid": "n1", "deviceuuid": uuid, "deviceidx": idx, "zone": "vGPU"}
    typed = {**dev, "devicetype": "NVIDIA-Tesla T4"}
    assert _value(s, "GPUDeviceMemoryLimit", **typed) == 8000 * MIB
    assert _value(s, "GPUDeviceCoreLimit", **typed) == 100
    assert _value(s, "GPUDeviceMemoryAllocated", devicecores="100", **typed) == 3000 * MIB
    assert _value(s, "GPUDeviceSharedNum", **typed) == 1
    assert _value(s, "GPUDeviceCoreAllocated", **typed) == 30
    assert _value(s, "nodeGPUOverview", devicecores="100", devicememorylimit="8000", **typed) == 3000 * MIB
    assert _value(s, "nodeGPUMemoryPercentage", **dev) == 3000 / 8000
    quota = {"quotanamespace": "default", "quotaName": "nvidia.com/gpumem", "limit": "10000", "zone": "vGPU"}
    assert _value(s, "QuotaUsed", **quota) == 3000
    pod = {
        "podnamespace": "default",
        "nodename": "n1",
        "podname": "p1",
        "containeridx": "0",
        "deviceuuid": uuid,
    }
    assert _value(s, "vGPUMemoryAllocated", zone="vGPU", **pod) == 3000 * MIB
    assert _value(s, "vGPUCoreAllocated", zone="vGPU", **pod) == 30
    families = {f.name: f.documentation for f in text_string_to_metric_families(metrics_text(ext))}
    assert families["GPUDeviceCoreLimit"] == "Device memory core limit for a certain GPU"  # HAMi's help text


def test_legacy_names_only_with_the_flag(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))
    with running(kube_api) as ext:
        names = {f.name for f in text_string_to_metric_families(metrics_text(ext))}
    assert "hami_gpu_memory_limit_bytes" in names
    assert not names & {"GPUDeviceMemoryLimit", "nodeGPUOverview", "QuotaUsed", "vGPUCoreAllocated"}


def test_a_fresh_extender_exports_every_bounded_label_value_at_zero(kube_api: KubeAPIServer) -> None:
    """increase() over a series born at its first event sees nothing: HAMiNodeLockExpired and every
    rate() by reason need the series at 0 before anything happens."""
    kube_api.store.put(gpu_node("n1"))
    with running(kube_api) as ext:
        samples = _samples(metrics_text(ext))
    counters = {
        "hami_scheduler_node_lock_expired_total": ("cause", {"expired", "owner_gone"}),
        "hami_scheduler_events_total": ("reason", {events.FILTERING_FAILED, events.FILTERING_SUCCEED,
                                                   events.BINDING_FAILED, events.BINDING_SUCCEED}),
        "hami_scheduler_filter_failures_total": (
            "reason", {"CardInsufficientMemory", "NodeInsufficientDevice", "NodeUnregistered", "Other"}
        ),
        "hami_scheduler_decode_errors_total": ("source", {"node_register", "pod_devices"}),
        "hami_scheduler_filter_duration_seconds_count": ("result", {"fit", "unschedulable", "error"}),
        "hami_scheduler_bind_duration_seconds_count": ("result", {"success", "error", "not_leader"}),
        "hami_scheduler_bind_phase_duration_seconds_count": ("phase", {"node_lock", "bind"}),
    }
    for name, (label, values) in counters.items():
        for value in values:
            assert _value(samples, name, **{label: value}) == 0.0, (name, value)


# The one name promtool's "_count suffix" lint flags that is fixed: HAMi's own §7.1 family.
CONTRACT_NAMES_FLAGGED = {
    'hami_gpu_shared_count non-histogram and non-summary metrics should not have "_count" suffix',
}


def test_promtool_check_metrics_on_a_live_scrape(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(gpu_node("n1"))
    with running(kube_api) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p1", mem=3000, cores=30))
        filter_pod(ext, pod, ["n1"])
        assert bind_pod(ext, pod, "n1") == ""
        text = metrics_text(ext)
    assert "hami_scheduler_bind_duration_seconds_bucket" in text  # histograms are in the scrape
    done = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    problems = {line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()}
    assert problems == CONTRACT_NAMES_FLAGGED
    # promtool's parser accepted the whole exposition: a broken line would be an error, not a lint.
    assert done.returncode in (0, 3), done.stderr
