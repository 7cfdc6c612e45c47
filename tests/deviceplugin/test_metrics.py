from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from hami.core.devices import DeviceInfo
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.metrics import PluginMetrics


def test_tuning_inputs_and_device_series_follow_the_state() -> None:
    registry = CollectorRegistry()
    m = PluginMetrics(registry, "n1")
    m.set_config(PluginConfig(device_split_count=20, device_memory_scaling=1.5, device_core_scaling=0.8))
    assert registry.get_sample_value("hami_device_split_limit", {"node": "n1"}) == 20
    assert registry.get_sample_value("hami_device_memory_scaling", {"node": "n1"}) == 1.5
    assert registry.get_sample_value("hami_device_core_scaling", {"node": "n1"}) == 0.8
    a = DeviceInfo(id="GPU-a", index=0, type="NVIDIA-T4", health=True)
    b = DeviceInfo(id="GPU-b", index=1, type="NVIDIA-T4", health=False)
    m.set_devices([a, b])
    labels = {"node": "n1", "device_uuid": "GPU-b", "device_index": "1", "device_type": "NVIDIA-T4"}
    assert registry.get_sample_value("hami_device_health", labels) == 0
    m.set_devices([a])  # a GPU filtered out at restart: its series goes away
    assert registry.get_sample_value("hami_device_health", labels) is None
    # Every reason exists from the start, so rate() works before the first failure.
    assert (
        registry.get_sample_value(
            "hami_deviceplugin_allocate_errors_total", {"node": "n1", "reason": "unknown_device"}
        )
        == 0
    )
    for result in ("success", "failure"):
        count = {"node": "n1", "result": result}
        assert registry.get_sample_value("hami_deviceplugin_allocate_duration_seconds_count", count) == 0
    # a device's health events start at 0 too: the first Xid is an increase, not a new series at 1
    event = {"node": "n1", "device_uuid": "GPU-a", "event": "xid_critical"}
    assert registry.get_sample_value("hami_deviceplugin_health_events_total", event) == 0


@pytest.mark.parametrize("mode", ["hami-core", "driver"])
def test_memory_enforcement_is_one_for_the_configured_mode_and_zero_for_the_other(mode: str) -> None:
    registry = CollectorRegistry()
    PluginMetrics(registry, "n1").set_config(PluginConfig(memory_enforcement=mode))
    got = {
        e: registry.get_sample_value("hami_device_memory_enforcement", {"node": "n1", "enforcement": e})
        for e in ("hami-core", "driver")
    }
    assert got == {"hami-core": float(mode == "hami-core"), "driver": float(mode == "driver")}


def test_health_event_labels_are_bounded() -> None:
    m = PluginMetrics(CollectorRegistry(), "n1")
    m.health_event("GPU-a", "xid_critical")
    with pytest.raises(ValueError, match="unknown health event"):
        m.health_event("GPU-a", "anything")
