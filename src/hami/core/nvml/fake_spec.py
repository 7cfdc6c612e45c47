"""The fake NVML's node description (a dict, or a YAML file) and its mutable per-GPU state.

```yaml
driver_version: "550.54.15"        # optional
cuda_driver_version: 12040         # optional
init_error: LIBRARY_NOT_FOUND      # optional: nvmlInit fails with this code (a node without a driver)
memory_limits: true                # optional, false: a driver before nvmlDevice{Get,Set}MemoryLimits_v1
                                   # (both answer FUNCTION_NOT_FOUND)
cgroups:                           # optional: the cgroups (full sysfs paths) the driver can account to
  - /sys/fs/cgroup/kubepods.slice/...   # (Get/Set on another path answer NOT_FOUND)
devices:
  - uuid: GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec
    name: Tesla V100-PCIE-32GB
    memory_mib: 32768              # or memory_bytes
    memory_used_mib: 0             # optional
    pci_bus_id: "00000000:3B:00.0" # optional, derived from the index
    numa: 0
    minor: 0                       # optional, defaults to the index
    compute_capability: [7, 0]
    utilization: {gpu: 0, memory: 0}
    temperature: 40
    power_mw: 50000
    ecc: {corrected: 0, uncorrected: 0}
    temperature_thresholds: {slowdown: 90, shutdown: 95}
    retired_pages: {single_bit: 0, double_bit: 0, pending: false}   # pre-Ampere page retirement
    remapped_rows: {correctable: 0, uncorrectable: 0, pending: false, failure: false}  # Ampere+
    clock_event_reasons: 0         # nvmlClocksEventReason* bits active now
    lost: false                    # fallen off the bus: every call on it answers GPU_IS_LOST
    nvlinks: {1: 2, 3: 1}          # active NVLinks to other GPUs: {peer index: link count}
    nvswitch_links: 0              # active NVLinks to NVSwitches (every GPU behind them is reachable)
    pcie: {board: b0, switch: s0, host_bridge: h0}   # optional; the closest one shared by two GPUs is
                                   # their common ancestor, else the NUMA node (numa), else the system
    supported_events: 11           # optional bit mask, default Xid | single- and double-bit ECC
    unsupported: [nvmlDeviceGetPowerUsage]  # calls that answer NOT_SUPPORTED on this GPU
    processes: [{pid: 1234, used_mib: 1024}]
    cgroup_memory:                 # per cgroup path: limits set (Set's semantics) and memory in use
      /sys/fs/cgroup/kubepods.slice/...: {soft_mib: 0, hard_mib: 4096, used_mib: 1024}
    mig:                           # present = MIG-capable; enabled toggles MIG mode
      enabled: true
      profiles:                    # the GPU-instance profiles the card offers (dynamic partitioning)
        - {id: 19, name: 1g.5gb, slices: 1, memory_mib: 4864, instances: 7, placements: [[0, 1], [1, 1]]}
      instances:                   # present at nvmlInit (left over); placement makes it a GPU instance
        - {uuid: MIG-..., profile: 1g.5gb, gpu_instance_id: 7, compute_instance_id: 0, memory_mib: 4864,
           placement: [0, 1]}
events:                            # optional: critical Xids the fake raises on its own, so a process
                                   # that holds the fake (a device plugin) can be driven from outside
  - {after_seconds: 5, device: 3, xid: 79}                     # once, 5 s after nvmlInit
  - {after_seconds: 5, device: 3, xid: 79, every_seconds: 5}   # then again every 5 s
```
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hami.core.nvml.api import (
    CODE_NAMES,
    HEALTH_EVENTS,
    MEMORY_LIMIT_MAX,
    GpuInstanceProfile,
    MemoryInfo,
    MigDeviceInfo,
    ProcessInfo,
)

MIB = 1 << 20


class FakeSpecError(ValueError):
    """The fake node description is malformed; the message names the key."""


@dataclass
class FakeGpu:
    """Mutable state of one fake GPU; change it under ``FakeNvml.lock`` (or with ``FakeNvml.update``)."""

    uuid: str
    name: str
    memory_total: int  # bytes
    memory_used: int = 0
    pci_bus_id: str = ""
    numa: int = 0
    minor: int = 0
    compute_capability: tuple[int, int] = (8, 0)
    utilization_gpu: int = 0
    utilization_memory: int = 0
    temperature: int = 35
    power_mw: int = 60000
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    temperature_slowdown: int = 90
    temperature_shutdown: int = 95
    retired_single_bit: int = 0
    retired_double_bit: int = 0
    retired_pending: bool = False
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    clock_event_reasons: int = 0
    lost: bool = False
    nvlinks: dict[int, int] = field(default_factory=dict)
    nvswitch_links: int = 0
    pcie_board: str = ""
    pcie_switch: str = ""
    pcie_host_bridge: str = ""
    supported_events: int = HEALTH_EVENTS
    unsupported: frozenset[str] = frozenset()
    processes: list[ProcessInfo] = field(default_factory=list)
    mig_capable: bool = False
    mig_enabled: bool = False
    mig_instances: list[MigDeviceInfo] = field(default_factory=list)  # compute instances (MIG devices)
    mig_profiles: list[GpuInstanceProfile] = field(default_factory=list)
    # GPU instances: id -> (profile id, placement start, size)
    mig_gpu_instances: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    # the driver's per-cgroup accounting: cgroup path -> [soft, hard, used] in bytes (a cgroup not here
    # has no limit and no use on this GPU)
    cgroup_memory: dict[str, list[int]] = field(default_factory=dict)

    def memory(self) -> MemoryInfo:
        return MemoryInfo(
            total=self.memory_total, free=self.memory_total - self.memory_used, used=self.memory_used
        )


@dataclass(frozen=True)
class FakeEvent:
    """A critical Xid raised on GPU ``device`` (index) ``after_seconds`` after nvmlInit, and then every
    ``every_seconds`` (None: once)."""

    after_seconds: float
    device: int
    xid: int
    every_seconds: float | None = None


@dataclass
class FakeNode:
    gpus: list[FakeGpu]
    driver_version: str = "550.54.15"
    cuda_driver_version: int = 12040
    init_error: str | None = None
    events: list[FakeEvent] = field(default_factory=list)
    memory_limits: bool = True  # the driver has nvmlDevice{Get,Set}MemoryLimits_v1
    cgroups: set[str] = field(default_factory=set)  # the cgroups that exist, by full sysfs path


def _get(d: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any = None) -> Any:
    value = d.get(key, default)
    if value is None and default is None:
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise FakeSpecError(f"{where}.{key}: expected {kind}, got {value!r}")
    return value


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise FakeSpecError(f"{where}: expected a mapping, got {value!r}")
    return value


def _bytes(d: dict[str, Any], stem: str, where: str, default: int | None = None) -> int | None:
    if f"{stem}_bytes" in d:
        return int(_get(d, f"{stem}_bytes", int, where))
    if f"{stem}_mib" in d:
        return int(_get(d, f"{stem}_mib", int, where)) * MIB
    return default


def _gpu(i: int, d: Any) -> FakeGpu:
    where = f"devices[{i}]"
    d = _mapping(d, where)
    total = _bytes(d, "memory", where)
    if total is None or total <= 0:
        raise FakeSpecError(f"{where}: memory_mib or memory_bytes (> 0) is required")
    used = _bytes(d, "memory_used", where, 0) or 0
    if not 0 <= used <= total:
        raise FakeSpecError(f"{where}: memory used {used} outside [0, {total}]")
    util = _get(d, "utilization", dict, where, {})
    ecc = _get(d, "ecc", dict, where, {})
    thresholds = _get(d, "temperature_thresholds", dict, where, {})
    pcie = _get(d, "pcie", dict, where, {})
    nvlinks = _get(d, "nvlinks", dict, where, {})
    for peer, count in nvlinks.items():
        if not isinstance(peer, int) or isinstance(peer, bool) or not isinstance(count, int) or count < 0:
            raise FakeSpecError(f"{where}.nvlinks: want {{peer index: link count}}, got {peer!r}: {count!r}")
    retired = _get(d, "retired_pages", dict, where, {})
    remapped = _get(d, "remapped_rows", dict, where, {})
    cc = _get(d, "compute_capability", list, where, [8, 0])
    procs = [
        ProcessInfo(
            pid=_get(_mapping(p, f"{where}.processes[{j}]"), "pid", int, f"{where}.processes[{j}]", 0),
            used_memory=_bytes(p, "used", f"{where}.processes[{j}]"),
        )
        for j, p in enumerate(_get(d, "processes", list, where, []))
    ]
    gpu = FakeGpu(
        uuid=_get(d, "uuid", str, where, f"GPU-{i:08x}-0000-0000-0000-000000000000"),
        name=_get(d, "name", str, where, "NVIDIA A100-SXM4-40GB"),
        memory_total=total,
        memory_used=used,
        pci_bus_id=_get(d, "pci_bus_id", str, where, f"00000000:{0x1A + i:02X}:00.0"),
        numa=_get(d, "numa", int, where, 0),
        minor=_get(d, "minor", int, where, i),
        compute_capability=(int(cc[0]), int(cc[1])),
        utilization_gpu=_get(util, "gpu", int, f"{where}.utilization", 0),
        utilization_memory=_get(util, "memory", int, f"{where}.utilization", 0),
        temperature=_get(d, "temperature", int, where, 35),
        power_mw=_get(d, "power_mw", int, where, 60000),
        ecc_corrected=_get(ecc, "corrected", int, f"{where}.ecc", 0),
        ecc_uncorrected=_get(ecc, "uncorrected", int, f"{where}.ecc", 0),
        temperature_slowdown=_get(thresholds, "slowdown", int, f"{where}.temperature_thresholds", 90),
        temperature_shutdown=_get(thresholds, "shutdown", int, f"{where}.temperature_thresholds", 95),
        retired_single_bit=_get(retired, "single_bit", int, f"{where}.retired_pages", 0),
        retired_double_bit=_get(retired, "double_bit", int, f"{where}.retired_pages", 0),
        retired_pending=_get(retired, "pending", bool, f"{where}.retired_pages", False),
        remapped_correctable=_get(remapped, "correctable", int, f"{where}.remapped_rows", 0),
        remapped_uncorrectable=_get(remapped, "uncorrectable", int, f"{where}.remapped_rows", 0),
        remap_pending=_get(remapped, "pending", bool, f"{where}.remapped_rows", False),
        remap_failure=_get(remapped, "failure", bool, f"{where}.remapped_rows", False),
        clock_event_reasons=_get(d, "clock_event_reasons", int, where, 0),
        lost=_get(d, "lost", bool, where, False),
        nvlinks=dict(nvlinks),
        nvswitch_links=_get(d, "nvswitch_links", int, where, 0),
        pcie_board=str(_get(pcie, "board", str, f"{where}.pcie", "")),
        pcie_switch=str(_get(pcie, "switch", str, f"{where}.pcie", "")),
        pcie_host_bridge=str(_get(pcie, "host_bridge", str, f"{where}.pcie", "")),
        supported_events=_get(d, "supported_events", int, where, HEALTH_EVENTS),
        unsupported=frozenset(str(c) for c in _get(d, "unsupported", list, where, [])),
        processes=procs,
        cgroup_memory=_cgroup_memory(_get(d, "cgroup_memory", dict, where, {}), f"{where}.cgroup_memory"),
    )
    mig = _get(d, "mig", dict, where)
    if mig is not None:
        gpu.mig_capable = True
        gpu.mig_enabled = bool(mig.get("enabled", False))
        gpu.mig_profiles = [
            _profile(p, f"{where}.mig.profiles[{j}]")
            for j, p in enumerate(_get(mig, "profiles", list, f"{where}.mig", []))
        ]
        for j, raw in enumerate(_get(mig, "instances", list, f"{where}.mig", [])):
            at = f"{where}.mig.instances[{j}]"
            m = _mapping(raw, at)
            mem = _bytes(m, "memory", at, 0) or 0
            profile = _get(m, "profile", str, at, "1g.5gb")
            info = MigDeviceInfo(
                index=j,
                uuid=_get(m, "uuid", str, at, f"MIG-{i:04x}{j:04x}-0000-0000-0000-000000000000"),
                name=f"{gpu.name} MIG {profile}",
                gpu_instance_id=_get(m, "gpu_instance_id", int, at, j + 1),
                compute_instance_id=_get(m, "compute_instance_id", int, at, 0),
                memory=MemoryInfo(total=mem, free=mem, used=0),
            )
            gpu.mig_instances.append(info)
            placement = _get(m, "placement", list, at)
            if placement is not None:
                known = {p.name: p.id for p in gpu.mig_profiles}
                if profile not in known or len(placement) != 2:
                    raise FakeSpecError(
                        f"{at}: a placed instance needs a profile of mig.profiles and [start, size]"
                    )
                gpu.mig_gpu_instances[info.gpu_instance_id] = (
                    known[profile],
                    int(placement[0]),
                    int(placement[1]),
                )
    return gpu


def _cgroup_memory(raw: dict[Any, Any], where: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for path, entry in raw.items():
        at = f"{where}[{path!r}]"
        if not isinstance(path, str) or not path.startswith("/"):
            raise FakeSpecError(f"{at}: a cgroup is named by its full sysfs path")
        m = _mapping(entry, at)
        soft = _bytes(m, "soft", at, 0) or 0
        hard = _bytes(m, "hard", at, MEMORY_LIMIT_MAX)
        used = _bytes(m, "used", at, 0) or 0
        if hard is None or not 0 <= soft <= hard or used < 0:
            raise FakeSpecError(f"{at}: want 0 <= soft <= hard and used >= 0")
        out[path] = [soft, hard, used]
    return out


def _profile(raw: Any, where: str) -> GpuInstanceProfile:
    d = _mapping(raw, where)
    placements = _get(d, "placements", list, where, [])
    if not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(v, int) for v in p) for p in placements
    ):
        raise FakeSpecError(f"{where}.placements: want [[start, size], ...], got {placements!r}")
    return GpuInstanceProfile(
        id=_get(d, "id", int, where, 0),
        name=_get(d, "name", str, where, ""),
        slice_count=_get(d, "slices", int, where, 1),
        memory_mib=_get(d, "memory_mib", int, where, 0),
        instance_count=_get(d, "instances", int, where, len(placements)),
        placements=tuple((p[0], p[1]) for p in placements),
    )


def _event(i: int, d: Any, gpus: int) -> FakeEvent:
    where = f"events[{i}]"
    d = _mapping(d, where)
    after = _get(d, "after_seconds", (int, float), where, 0)
    every = _get(d, "every_seconds", (int, float), where)
    device = _get(d, "device", int, where, -1)
    xid = _get(d, "xid", int, where, -1)
    if after < 0 or (every is not None and every <= 0):
        raise FakeSpecError(f"{where}: after_seconds must be >= 0 and every_seconds > 0")
    if not 0 <= device < gpus:
        raise FakeSpecError(f"{where}.device: index {device} outside [0, {gpus})")
    if xid < 0:
        raise FakeSpecError(f"{where}.xid: a non-negative Xid is required")
    return FakeEvent(float(after), device, xid, None if every is None else float(every))


def load_spec(spec: dict[str, Any] | str | Path) -> FakeNode:
    """Build the node from a dict or a YAML file path."""
    if isinstance(spec, (str, Path)):
        try:
            data = yaml.safe_load(Path(spec).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise FakeSpecError(f"cannot read fake NVML spec {spec}: {exc}") from None
    else:
        data = spec
    if not isinstance(data, dict):
        raise FakeSpecError(f"fake NVML spec must be a mapping, got {type(data).__name__}")
    devices = _get(data, "devices", list, "spec", [])
    gpus = [_gpu(i, d) for i, d in enumerate(devices)]
    init_error = _get(data, "init_error", str, "spec")
    if init_error is not None and init_error not in CODE_NAMES:
        raise FakeSpecError(f"spec.init_error: unknown NVML return code {init_error!r}")
    if len({g.uuid for g in gpus}) != len(gpus):
        raise FakeSpecError("spec.devices: duplicate uuid")
    for i, g in enumerate(gpus):
        bad = [peer for peer in g.nvlinks if peer == i or not 0 <= peer < len(gpus)]
        if bad:
            raise FakeSpecError(f"devices[{i}].nvlinks: peer {bad[0]} is not another device's index")
    return FakeNode(
        gpus=gpus,
        driver_version=_get(data, "driver_version", str, "spec", "550.54.15"),
        cuda_driver_version=_get(data, "cuda_driver_version", int, "spec", 12040),
        init_error=init_error,
        events=[_event(i, e, len(gpus)) for i, e in enumerate(_get(data, "events", list, "spec", []))],
        memory_limits=_get(data, "memory_limits", bool, "spec", True),
        # every path a GPU accounts to exists, and so do the listed ones
        cgroups={str(c) for c in _get(data, "cgroups", list, "spec", [])}
        | {path for g in gpus for path in g.cgroup_memory},
    )
