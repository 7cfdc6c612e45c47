"""The part of HAMi's device-config YAML (``--device-config-file``) the scheduler uses
(docs/design/scheduler-filter.md §3.1): what
requests and fit need, and the admission webhook's ``gpuCorePolicy``, ``runtimeClassName`` and
``overwriteEnv`` (§8).

The loader is pure: it takes the already-parsed YAML document (a dict) and returns a frozen config;
reading the file is the caller's job.

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hami.core import annotations as ann

DEFAULT_CORE_POLICY = "default"


class DeviceConfigError(ValueError):
    """A device-config field has the wrong type or an impossible value."""


@dataclass(frozen=True)
class NvidiaConfig:
    resource_count_name: str = ann.RESOURCE_GPU
    resource_memory_name: str = ann.RESOURCE_GPUMEM
    resource_memory_percentage_name: str = ann.RESOURCE_GPUMEM_PERCENTAGE
    resource_core_name: str = ann.RESOURCE_GPUCORES
    resource_priority_name: str = "nvidia.com/priority"
    default_memory: int = 0  # MiB; 0 means "the whole card" (percentage 100)
    default_cores: int = 0
    default_gpu_num: int = 1
    memory_factor: int = 1  # 0 in the YAML is treated as 1, like HAMi
    # Webhook only (§8). ``gpu_core_policy`` other than "default" (HAMi-core knows "force" and
    # "disable") becomes env GPU_CORE_UTILIZATION_POLICY; ``runtime_class_name`` is set on pods with
    # HAMi resources that name none; ``overwrite_env`` gives containers without HAMi resources
    # NVIDIA_VISIBLE_DEVICES=none.
    gpu_core_policy: str = DEFAULT_CORE_POLICY
    runtime_class_name: str = ""
    overwrite_env: bool = False

    @property
    def factor(self) -> int:
        return self.memory_factor if self.memory_factor > 0 else 1


_STR_FIELDS = {
    "resourceCountName": "resource_count_name",
    "resourceMemoryName": "resource_memory_name",
    "resourceMemoryPercentageName": "resource_memory_percentage_name",
    "resourceCoreName": "resource_core_name",
    "resourcePriorityName": "resource_priority_name",
    "gpuCorePolicy": "gpu_core_policy",
    "runtimeClassName": "runtime_class_name",
}
_INT_FIELDS = {
    "defaultMemory": "default_memory",
    "defaultCores": "default_cores",
    "defaultGPUNum": "default_gpu_num",
    "memoryFactor": "memory_factor",
}
_BOOL_FIELDS = {"overwriteEnv": "overwrite_env"}


def load_nvidia_config(document: Mapping[str, object] | None) -> NvidiaConfig:
    """Build the NVIDIA config from a parsed device-config document (its ``nvidia:`` section).

    Missing keys keep HAMi's built-in defaults; keys the scheduler core does not use are ignored.
    """
    if not document:
        return NvidiaConfig()
    section = document.get("nvidia")
    if section is None:
        return NvidiaConfig()
    if not isinstance(section, Mapping):
        raise DeviceConfigError(f"device config: 'nvidia' must be a mapping, got {type(section).__name__}")
    values: dict[str, str | int | bool] = {}
    for key, attr in _STR_FIELDS.items():
        raw = section.get(key)
        if raw is None:
            continue
        if not isinstance(raw, str):
            raise DeviceConfigError(f"device config: nvidia.{key} must be a string, got {raw!r}")
        values[attr] = raw
    for key, attr in _INT_FIELDS.items():
        raw = section.get(key)
        if raw is None:
            continue
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise DeviceConfigError(f"device config: nvidia.{key} must be an integer, got {raw!r}")
        if raw < 0:
            raise DeviceConfigError(f"device config: nvidia.{key} must not be negative, got {raw}")
        values[attr] = raw
    for key, attr in _BOOL_FIELDS.items():
        raw = section.get(key)
        if raw is None:
            continue
        if not isinstance(raw, bool):
            raise DeviceConfigError(f"device config: nvidia.{key} must be true or false, got {raw!r}")
        values[attr] = raw
    return NvidiaConfig(**values)  # type: ignore[arg-type]
