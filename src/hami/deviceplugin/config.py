"""Device-plugin configuration: HAMi's device YAML, the per-node JSON, and flag fallbacks (§C.1–§C.2).

Precedence, lowest first: command-line flags / env (HAMi parses these but ignores them; here they are
the fallback when the device YAML omits a field instead of a nil-pointer panic), the ``nvidia:`` section
of the device YAML, then every matching ``nodeconfig`` entry. A node entry's ``name`` is an exact node
name or a shell wildcard (``inference-pool-*``, docs/guides/tuning.md §4.4); wildcard entries apply first and
exact ones last, so a named node always beats its pool. As in HAMi (mergo WithOverride), zero values in the
JSON never override.

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from hami.core.devices import ENFORCE_HAMI_CORE, ENFORCEMENTS, MODE_HAMI_CORE, MODE_MIG, MODE_MPS

MODES = frozenset({MODE_HAMI_CORE, MODE_MIG, MODE_MPS})


class ConfigError(ValueError):
    """The configuration cannot be used; ``str()`` names the file and the field."""


@dataclass(frozen=True)
class FilterDevices:
    """Devices never advertised nor registered (``filterdevices`` in the node JSON)."""

    uuids: frozenset[str] = frozenset()
    indexes: frozenset[int] = frozenset()

    def excludes(self, uuid: str, index: int) -> bool:
        return uuid in self.uuids or index in self.indexes

    def __bool__(self) -> bool:
        return bool(self.uuids or self.indexes)


@dataclass(frozen=True)
class PluginConfig:
    """The effective node configuration after every merge."""

    device_split_count: int = 2
    device_memory_scaling: float = 1.0
    device_core_scaling: float = 1.0
    pre_configured_device_memory: int = 0  # MiB, used only when NVML memory info is NOT_SUPPORTED
    lib_cuda_log_level: str = ""
    enable_numa_topology: bool = False
    disable_core_limit: bool = False
    operating_mode: str = MODE_HAMI_CORE  # "" when the node JSON could not be read (HAMi quirk)
    filter_devices: FilterDevices = field(default_factory=FilterDevices)
    enable_get_preferred_allocation: bool = False
    resource_name: str = "nvidia.com/gpu"
    # NVIDIA time-slicing option that makes multi-replica MIG requests fail (request_too_large).
    fail_requests_greater_than_one: bool = False
    # migProfileAllowlist: (model substrings, profile names) pairs; empty lets every profile through.
    mig_profile_allowlist: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
    # Ours: who enforces vGPU memory limits on this node's cards (§C.11): HAMi-core, or the driver.
    memory_enforcement: str = ENFORCE_HAMI_CORE

    def allowed_mig_profiles(self, model: str) -> frozenset[str] | None:
        """The MIG profile names allowed on a GPU of ``model``; None when every one is."""
        if not self.mig_profile_allowlist:
            return None
        return frozenset(
            name
            for models, names in self.mig_profile_allowlist
            if any(m in model for m in models)
            for name in names
        )

    @property
    def socket_name(self) -> str:
        """``nvidia-<part after '/'>.sock``; ``nvidia-gpu.sock`` for ``nvidia.com/gpu``."""
        return f"nvidia-{self.resource_name.rsplit('/', 1)[-1]}.sock"


# Keys of HAMi's inline NodeDefaultConfig in the device YAML (yaml.v2: exact, case-sensitive).
_YAML_FIELDS: dict[str, str] = {
    "deviceSplitCount": "device_split_count",
    "deviceMemoryScaling": "device_memory_scaling",
    "deviceCoreScaling": "device_core_scaling",
    "preConfiguredDeviceMemory": "pre_configured_device_memory",
    "libCudaLogLevel": "lib_cuda_log_level",
    "enableNumaTopology": "enable_numa_topology",
    "disableCoreLimit": "disable_core_limit",
    "resourceCountName": "resource_name",
    "memoryEnforcement": "memory_enforcement",
}

# Node JSON keys (encoding/json: case-insensitive) that merge over the defaults when non-zero.
_JSON_FIELDS: dict[str, str] = {
    "devicesplitcount": "device_split_count",
    "devicememoryscaling": "device_memory_scaling",
    "devicecorescaling": "device_core_scaling",
    "preconfigureddevicememory": "pre_configured_device_memory",
    "libcudaloglevel": "lib_cuda_log_level",
    "enablenumatopology": "enable_numa_topology",
    "memoryenforcement": "memory_enforcement",
}

_TYPES: dict[str, type] = {
    "device_split_count": int,
    "device_memory_scaling": float,
    "device_core_scaling": float,
    "pre_configured_device_memory": int,
    "lib_cuda_log_level": str,
    "enable_numa_topology": bool,
    "disable_core_limit": bool,
    "resource_name": str,
    "memory_enforcement": str,
}


def _coerce(name: str, value: Any, where: str) -> Any:
    want = _TYPES[name]
    if want is bool:
        if isinstance(value, bool):
            return value
    elif want is str:
        if isinstance(value, str | int) and not isinstance(value, bool):
            return str(value)
    elif want is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise ConfigError(f"{where}: {name} must be {want.__name__}, got {value!r}")


def _validate(cfg: PluginConfig, where: str) -> PluginConfig:
    if cfg.device_split_count < 1:
        raise ConfigError(f"{where}: deviceSplitCount must be >= 1, got {cfg.device_split_count}")
    if cfg.device_memory_scaling <= 0 or cfg.device_core_scaling <= 0:
        raise ConfigError(f"{where}: deviceMemoryScaling and deviceCoreScaling must be > 0")
    if cfg.pre_configured_device_memory < 0:
        raise ConfigError(f"{where}: preConfiguredDeviceMemory must be >= 0")
    if cfg.memory_enforcement not in ENFORCEMENTS:
        raise ConfigError(
            f"{where}: memoryEnforcement {cfg.memory_enforcement!r} is not one of {', '.join(ENFORCEMENTS)}"
        )
    return cfg


def apply_device_yaml(base: PluginConfig, text: str, where: str = "device config") -> PluginConfig:
    """Merges the ``nvidia:`` section (and NVIDIA's ``sharing.timeSlicing``) of the device YAML."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not YAML: {exc}") from exc
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: top level must be a mapping")
    nvidia = doc.get("nvidia") or {}
    if not isinstance(nvidia, Mapping):
        raise ConfigError(f"{where}: 'nvidia' must be a mapping")
    changes: dict[str, Any] = {}
    for key, attr in _YAML_FIELDS.items():
        if nvidia.get(key) is not None:
            changes[attr] = _coerce(attr, nvidia[key], f"{where}: nvidia.{key}")
    if nvidia.get("migProfileAllowlist") is not None:
        changes["mig_profile_allowlist"] = _allowlist(
            nvidia["migProfileAllowlist"], f"{where}: nvidia.migProfileAllowlist"
        )
    sharing = doc.get("sharing") or {}
    slicing = sharing.get("timeSlicing") if isinstance(sharing, Mapping) else None
    if isinstance(slicing, Mapping) and isinstance(slicing.get("failRequestsGreaterThanOne"), bool):
        changes["fail_requests_greater_than_one"] = slicing["failRequestsGreaterThanOne"]
    return _validate(replace(base, **changes), where)


def _allowlist(raw: Any, where: str) -> tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: must be a list of {{models: [...], profiles: [...]}}")
    out = []
    for i, entry in enumerate(raw):
        models = entry.get("models") if isinstance(entry, Mapping) else None
        profiles = entry.get("profiles") if isinstance(entry, Mapping) else None
        if not (isinstance(models, list) and isinstance(profiles, list)) or not all(
            isinstance(v, str) for v in [*models, *profiles]
        ):
            raise ConfigError(f"{where}[{i}]: needs models and profiles, each a list of strings")
        out.append((tuple(models), tuple(profiles)))
    return tuple(out)


def _node_entries(text: str, where: str) -> list[dict[str, Any]]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not JSON: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: top level must be an object")
    lowered = {str(k).lower(): v for k, v in doc.items()}
    entries = lowered.get("nodeconfig") or []
    if not isinstance(entries, list):
        raise ConfigError(f"{where}: nodeconfig must be a list")
    out: list[dict[str, Any]] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: nodeconfig[{i}] must be an object")
        out.append({str(k).lower(): v for k, v in entry.items()})
    return out


def _is_pattern(name: str) -> bool:
    return any(ch in name for ch in "*?[")


def matching_entries(entries: Iterable[dict[str, Any]], node_name: str) -> list[dict[str, Any]]:
    """Entries for ``node_name``: wildcard matches first, then exact names, each in file order."""
    entries = list(entries)
    wild = [e for e in entries if _is_pattern(str(e.get("name", "")))]
    exact = [e for e in entries if not _is_pattern(str(e.get("name", "")))]
    return [e for e in wild if fnmatch.fnmatchcase(node_name, str(e["name"]))] + [
        e for e in exact if e.get("name") == node_name
    ]


def _filter_of(raw: Any, where: str) -> FilterDevices:
    if raw is None:
        return FilterDevices()
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: filterdevices must be an object")
    low = {str(k).lower(): v for k, v in raw.items()}
    uuids = low.get("uuid") or []
    indexes = low.get("index") or []
    if not all(isinstance(u, str) for u in uuids):
        raise ConfigError(f"{where}: filterdevices.uuid must be a list of strings")
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in indexes):
        raise ConfigError(f"{where}: filterdevices.index must be a list of integers")
    return FilterDevices(frozenset(uuids), frozenset(indexes))


def apply_node_json(
    base: PluginConfig, text: str, node_name: str, where: str = "node config"
) -> PluginConfig:
    """Merges every ``nodeconfig`` entry that matches ``node_name`` over ``base``."""
    cfg = base
    for entry in matching_entries(_node_entries(text, where), node_name):
        at = f"{where}: nodeconfig[name={entry.get('name')!r}]"
        changes: dict[str, Any] = {}
        for key, attr in _JSON_FIELDS.items():
            value = entry.get(key)
            if value is not None:
                value = _coerce(attr, value, f"{at}.{key}")
                if value:  # mergo WithOverride: zero values never override
                    changes[attr] = value
        mode = entry.get("operatingmode") or ""
        if mode:
            if mode not in MODES:
                raise ConfigError(f"{at}.operatingmode: {mode!r} is not one of {sorted(MODES)}")
            changes["operating_mode"] = mode
        filt = _filter_of(entry.get("filterdevices"), at)
        if filt:
            changes["filter_devices"] = filt
        if "enablegetpreferredallocation" in entry:
            changes["enable_get_preferred_allocation"] = bool(entry["enablegetpreferredallocation"])
        cfg = _validate(replace(cfg, **changes), at)
    return cfg


def load_config(
    base: PluginConfig,
    node_name: str,
    device_config_file: Path | None,
    node_config_file: Path | None,
) -> tuple[PluginConfig, str | None]:
    """Builds the effective config; returns it and the node-JSON problem to log, if any.

    A missing or bad device YAML is fatal (:class:`ConfigError`). A missing or bad node JSON is not:
    as in HAMi the mode then becomes "" (and is omitted from the register annotation).
    """
    cfg = base
    if device_config_file is not None:
        try:
            text = device_config_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"failed to load device config file {device_config_file}: {exc}") from exc
        cfg = apply_device_yaml(cfg, text, str(device_config_file))
    if node_config_file is None:
        return cfg, None
    try:
        text = node_config_file.read_text(encoding="utf-8")
        return apply_node_json(cfg, text, node_name, str(node_config_file)), None
    except (OSError, ConfigError) as exc:
        return replace(cfg, operating_mode=""), str(exc)
