"""Memory enforcement by the driver on a node (--memory-enforcement, device config, node JSON): what
Allocate gives a container, and what the node registers (§C.11).

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import pytest

from hami.core.codec.node_devices import encode_node_devices
from hami.core.devices import ENFORCE_DRIVER, ContainerDevice
from hami.core.hamicore import HostLayout
from hami.deviceplugin.config import ConfigError, PluginConfig, apply_device_yaml, apply_node_json
from hami.deviceplugin.container_setup import build_container_allocation, driver_memory_envs
from hami.deviceplugin.inventory import GpuFacts, build_register_devices
from hami.deviceplugin.main import build_parser, config_from

A = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
B = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"
MIB = 1 << 20


def _allocate(cfg: PluginConfig, devreq: tuple[ContainerDevice, ...]) -> dict[str, str]:
    got = build_container_allocation(
        devreq,
        cfg,
        HostLayout("/usr/local"),
        pod_uid="uid-1",
        container={"name": "main"},
        cache_id="c0ffee",
        lib_host_path="/usr/local/vgpu/libvgpu.so",
        license_present=False,
    )
    return got.envs


def test_driver_mode_gives_the_toolkit_hook_its_variables_instead_of_hami_cores() -> None:
    devreq = (ContainerDevice(A, "NVIDIA", 3000, 30), ContainerDevice(B, "NVIDIA", 5000, 60))
    core = _allocate(PluginConfig(), devreq)
    assert core["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m" and "NVIDIA_GPU_MEMORY_LIMIT" not in core
    envs = _allocate(PluginConfig(memory_enforcement=ENFORCE_DRIVER), devreq)
    assert not any(k.startswith("CUDA_DEVICE_MEMORY_LIMIT") for k in envs)
    # whole MiB, one value for every GPU of the container: the one that holds on each
    assert (envs["NVIDIA_GPU_MEMORY_LIMIT"], envs["NVIDIA_GPU_MEMORY_REQUEST"]) == ("3000", "3000")
    # the rest of HAMi-core's setup (its SM limit, its region) stays
    assert envs["CUDA_DEVICE_SM_LIMIT"] == "30" and envs["NVIDIA_VISIBLE_DEVICES"] == f"{A},{B}"
    assert driver_memory_envs((ContainerDevice(A, "NVIDIA", 0, 0),)) == {}


def test_enforcement_from_flag_device_yaml_and_node_json() -> None:
    assert PluginConfig().memory_enforcement == "hami-core"
    cfg = apply_device_yaml(PluginConfig(), "nvidia:\n  memoryEnforcement: driver\n")
    assert cfg.memory_enforcement == ENFORCE_DRIVER
    node = '{"nodeconfig": [{"name": "n1", "memoryenforcement": "driver"}]}'
    assert apply_node_json(PluginConfig(), node, "n1").memory_enforcement == ENFORCE_DRIVER
    assert apply_node_json(PluginConfig(), node, "n2").memory_enforcement == "hami-core"
    with pytest.raises(ConfigError, match="memoryEnforcement 'shim' is not one of hami-core, driver"):
        apply_device_yaml(PluginConfig(), "nvidia:\n  memoryEnforcement: shim\n")
    args = build_parser().parse_args(["--node-name", "n1", "--memory-enforcement", "driver"])
    assert config_from(args).memory_enforcement == ENFORCE_DRIVER
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--memory-enforcement", "shim"])


def test_registration_says_which_cards_the_driver_limits() -> None:
    facts = [
        GpuFacts(A, 0, "Tesla V100-PCIE-32GB", 32768 * MIB),
        GpuFacts(B, 1, "Tesla V100-PCIE-32GB", 32768 * MIB),
    ]
    core, _ = build_register_devices(facts, PluginConfig(device_split_count=10), {})
    driver, _ = build_register_devices(
        facts, PluginConfig(device_split_count=10, memory_enforcement=ENFORCE_DRIVER), {}
    )
    assert "memoryEnforcement" not in encode_node_devices(core)  # HAMi's bytes, unchanged
    assert [d.enforcement for d in driver] == ["driver", "driver"]
    assert encode_node_devices(driver).count('"memoryEnforcement":"driver"') == 2
