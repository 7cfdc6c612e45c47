from __future__ import annotations

from hami.core.devices import MigPlacement, MigProfile
from hami.deviceplugin.config import FilterDevices, PluginConfig
from hami.deviceplugin.inventory import (
    GpuFacts,
    build_register_devices,
    kubelet_devices,
    numa_from_sysfs_text,
    pci_sysfs_id,
    physical_device_id,
    register_type,
)

U0 = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"
U1 = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
GIB32 = 32 * 1024**3


def test_type_prefix_rule() -> None:
    assert register_type("Tesla V100-PCIE-32GB") == "NVIDIA-Tesla V100-PCIE-32GB"
    assert register_type("NVIDIA A100-SXM4-40GB") == "NVIDIA A100-SXM4-40GB"
    assert register_type("A100") == "NVIDIA-A100"


def test_spec_example_devices() -> None:
    facts = [
        GpuFacts(U1, 1, "Tesla V100-PCIE-32GB", GIB32, numa=1),
        GpuFacts(U0, 0, "Tesla V100-PCIE-32GB", GIB32),
    ]
    devs, skipped = build_register_devices(facts, PluginConfig(device_split_count=10), {})
    assert skipped == []
    assert [(d.id, d.index, d.count, d.devmem, d.devcore, d.numa, d.health) for d in devs] == [
        (U0, 0, 10, 32768, 100, 0, True),
        (U1, 1, 10, 32768, 100, 1, True),
    ]
    assert devs[0].type == "NVIDIA-Tesla V100-PCIE-32GB" and devs[0].mode == "hami-core"


def test_scaling_truncates_and_health_is_carried() -> None:
    cfg = PluginConfig(device_memory_scaling=1.5, device_core_scaling=0.5)
    devs, _ = build_register_devices([GpuFacts(U0, 0, "A", 10001 * 2**20)], cfg, {U0: False})
    assert (devs[0].devmem, devs[0].devcore, devs[0].health) == (15001, 50, False)


def test_filter_by_uuid_and_index() -> None:
    cfg = PluginConfig(filter_devices=FilterDevices(frozenset({U0}), frozenset({2})))
    facts = [GpuFacts(U0, 0, "A", GIB32), GpuFacts(U1, 1, "A", GIB32), GpuFacts("GPU-c", 2, "A", GIB32)]
    devs, _ = build_register_devices(facts, cfg, {})
    assert [d.id for d in devs] == [U1]


def test_memory_not_supported_uses_preconfigured_or_skips() -> None:
    facts = [GpuFacts(U0, 0, "NVIDIA GH200", None)]
    devs, skipped = build_register_devices(facts, PluginConfig(), {})
    assert devs == [] and skipped[0].uuid == U0
    devs, _ = build_register_devices(facts, PluginConfig(pre_configured_device_memory=97871), {})
    assert devs[0].devmem == 97871


def test_mig_mode_counts_instances_and_ignores_scaling() -> None:
    prof = MigProfile("1g.5gb", 4864, 15, 1, tuple(MigPlacement(i, 1) for i in range(7)))
    facts = [
        GpuFacts(U0, 0, "NVIDIA A100-SXM4-40GB", 40 * 1024**3, mig_profiles=(prof,)),
        GpuFacts(U1, 1, "B", GIB32),
    ]
    cfg = PluginConfig(operating_mode="mig", device_memory_scaling=2.0, device_core_scaling=0.5)
    devs, skipped = build_register_devices(facts, cfg, {})
    assert [(d.id, d.count, d.devmem, d.devcore, d.mig_profiles) for d in devs] == [
        (U0, 7, 40960, 100, (prof,))
    ]
    assert [s.uuid for s in skipped] == [U1]


def test_kubelet_split_ids_health_and_topology() -> None:
    devs, _ = build_register_devices(
        [GpuFacts(U0, 0, "A", GIB32, numa=1)], PluginConfig(device_split_count=3), {U0: False}
    )
    plain = kubelet_devices(devs, PluginConfig(device_split_count=3))
    assert [(d.id, d.health, d.numa) for d in plain] == [(f"{U0}-{i}", "Unhealthy", None) for i in range(3)]
    assert all(len(d.id) <= 63 for d in plain)
    topo = kubelet_devices(devs, PluginConfig(device_split_count=3, enable_numa_topology=True))
    assert {d.numa for d in topo} == {1}


def test_physical_device_id() -> None:
    assert physical_device_id(f"{U0}-7") == U0
    assert physical_device_id(f"{U0}::2") == U0
    assert physical_device_id(U0) == U0
    assert physical_device_id("GPU-a-3") == "GPU-a-3"


def test_sysfs_helpers() -> None:
    assert pci_sysfs_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert numa_from_sysfs_text("-1\n") == 0
    assert numa_from_sysfs_text("1\n") == 1
