from __future__ import annotations

import json
from pathlib import Path

import pytest

from hami.deviceplugin.config import (
    ConfigError,
    FilterDevices,
    PluginConfig,
    apply_device_yaml,
    apply_node_json,
    load_config,
)

DEVICE_YAML = """
nvidia:
  resourceCountName: nvidia.com/gpu
  deviceSplitCount: 10
  deviceMemoryScaling: 1
  deviceCoreScaling: 1
  libCudaLogLevel: 1
  disableCoreLimit: true
"""


def test_device_yaml_overrides_flag_fallbacks() -> None:
    cfg = apply_device_yaml(PluginConfig(device_split_count=2), DEVICE_YAML)
    assert cfg.device_split_count == 10
    assert cfg.device_memory_scaling == 1.0
    assert cfg.lib_cuda_log_level == "1"
    assert cfg.disable_core_limit
    assert cfg.socket_name == "nvidia-gpu.sock"


def test_absent_yaml_fields_keep_the_flag_values() -> None:
    cfg = apply_device_yaml(PluginConfig(device_split_count=7, device_memory_scaling=1.5), "nvidia: {}")
    assert (cfg.device_split_count, cfg.device_memory_scaling) == (7, 1.5)


def test_time_slicing_option_is_read() -> None:
    cfg = apply_device_yaml(
        PluginConfig(), "sharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: true\n"
    )
    assert cfg.fail_requests_greater_than_one


@pytest.mark.parametrize(
    "text",
    [
        "nvidia: {deviceSplitCount: ten}",
        "nvidia: {deviceSplitCount: 0}",
        "- 1",
        "nvidia: {deviceMemoryScaling: -1}",
    ],
)
def test_bad_device_yaml_is_a_clear_error(text: str) -> None:
    with pytest.raises(ConfigError, match="device config"):
        apply_device_yaml(PluginConfig(), text)


def test_node_json_keys_are_case_insensitive_and_zero_never_overrides() -> None:
    text = json.dumps(
        {
            "NodeConfig": [
                {
                    "Name": "gpu-1",
                    "OperatingMode": "mps",
                    "DeviceSplitCount": 0,
                    "deviceMemoryScaling": 2.0,
                    "filterdevices": {"uuid": ["GPU-x"], "index": [3]},
                    "enablegetpreferredallocation": True,
                }
            ]
        }
    )
    cfg = apply_node_json(PluginConfig(device_split_count=10), text, "gpu-1")
    assert cfg.device_split_count == 10
    assert cfg.device_memory_scaling == 2.0
    assert cfg.operating_mode == "mps"
    assert cfg.filter_devices == FilterDevices(frozenset({"GPU-x"}), frozenset({3}))
    assert cfg.enable_get_preferred_allocation
    assert apply_node_json(PluginConfig(), text, "gpu-2") == PluginConfig()


def test_wildcard_pool_entries_apply_and_an_exact_name_wins() -> None:
    # docs/guides/tuning.md §4.4: per-pool split counts; an exact entry listed earlier still wins.
    text = json.dumps(
        {
            "nodeconfig": [
                {"name": "inference-pool-7", "devicesplitcount": 30},
                {"name": "inference-pool-*", "devicesplitcount": 20, "devicememoryscaling": 1.5},
                {"name": "training-pool-*", "devicesplitcount": 5},
            ]
        }
    )
    base = PluginConfig(device_split_count=10)
    assert apply_node_json(base, text, "inference-pool-3").device_split_count == 20
    pinned = apply_node_json(base, text, "inference-pool-7")
    assert (pinned.device_split_count, pinned.device_memory_scaling) == (30, 1.5)
    assert apply_node_json(base, text, "training-pool-a").device_split_count == 5
    assert apply_node_json(base, text, "other").device_split_count == 10


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(ConfigError, match="operatingmode"):
        apply_node_json(PluginConfig(), '{"nodeconfig":[{"name":"n","operatingmode":"vgpu"}]}', "n")


def test_missing_device_yaml_is_fatal_with_hamis_text(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="failed to load device config file"):
        load_config(PluginConfig(), "n", tmp_path / "absent.yaml", None)


def test_unreadable_node_json_empties_the_mode_as_hami_does(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json", encoding="utf-8")
    cfg, problem = load_config(PluginConfig(), "n", None, bad)
    assert cfg.operating_mode == ""
    assert problem is not None and "not JSON" in problem
    cfg, problem = load_config(PluginConfig(), "n", None, tmp_path / "missing.json")
    assert cfg.operating_mode == "" and problem is not None
