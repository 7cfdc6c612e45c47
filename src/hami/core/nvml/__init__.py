"""NVML access for the monitor and the device plugin: one small interface, two backends.

``open_nvml()`` returns an initialised session (``nvmlInit`` exactly once per session object,
``nvmlShutdown`` on ``close``). Every failing call raises ``NvmlError(call, code)`` where ``call`` is
the NVML function name, so a caller can skip one series and count ``hami_*_nvml_errors_total{call}``.

NVML calls covered (method → NVML function):

- session: ``nvmlInit`` / ``nvmlShutdown``; ``device_count`` → ``nvmlDeviceGetCount``;
  ``device`` → ``nvmlDeviceGetHandleByIndex``; ``device_by_uuid`` → ``nvmlDeviceGetHandleByUUID``
  (+ ``nvmlDeviceGetIndex``); ``driver_version`` → ``nvmlSystemGetDriverVersion``;
  ``cuda_driver_version`` → ``nvmlSystemGetCudaDriverVersion``.
- device (discovery, §C.3/§C.4): ``uuid`` → ``nvmlDeviceGetUUID``; ``name`` → ``nvmlDeviceGetName``;
  ``pci_bus_id`` → ``nvmlDeviceGetPciInfo``; ``numa_node_id`` → ``nvmlDeviceGetNumaNodeId``;
  ``minor_number`` → ``nvmlDeviceGetMinorNumber``;
  ``cuda_compute_capability`` → ``nvmlDeviceGetCudaComputeCapability``.
- device (monitor metrics, docs/design/node-agent-monitor.md §B.2 and the metrics contract): ``memory_info`` →
  ``nvmlDeviceGetMemoryInfo``;
  ``utilization_rates`` → ``nvmlDeviceGetUtilizationRates`` (gpu and memory-controller);
  ``temperature`` → ``nvmlDeviceGetTemperature`` (GPU sensor); ``power_usage`` → ``nvmlDeviceGetPowerUsage``;
  ``total_ecc_errors`` → ``nvmlDeviceGetTotalEccErrors``; ``retired_pages`` → ``nvmlDeviceGetRetiredPages``
  (+ ``nvmlDeviceGetRetiredPagesPendingStatus``); ``remapped_rows`` → ``nvmlDeviceGetRemappedRows``;
  ``temperature_threshold`` → ``nvmlDeviceGetTemperatureThreshold``; ``clock_event_reasons`` →
  ``nvmlDeviceGetCurrentClocksEventReasons`` (the older ``...ThrottleReasons`` on drivers before 535);
  ``compute_running_processes`` → ``nvmlDeviceGetComputeRunningProcesses``.
- topology (``hami.io/node-nvidia-score``): ``topology_common_ancestor`` →
  ``nvmlDeviceGetTopologyCommonAncestor``; ``nvlink_remotes`` → ``nvmlDeviceGetNvLinkState``,
  ``nvmlDeviceGetNvLinkRemotePciInfo``, ``nvmlDeviceGetNvLinkRemoteDeviceType`` per link;
- MIG (§C.8, ``hami_mig_device_info``): ``mig_mode`` → ``nvmlDeviceGetMigMode``; ``mig_devices`` →
  ``nvmlDeviceGetMaxMigDeviceCount``, ``nvmlDeviceGetMigDeviceHandleByIndex``, ``nvmlDeviceGetGpuInstanceId``,
  ``nvmlDeviceGetComputeInstanceId`` (+ UUID, name and memory of each MIG device).
- health (§C.9): ``supported_event_types`` → ``nvmlDeviceGetSupportedEventTypes``; ``event_set`` →
  ``nvmlEventSetCreate``; ``register`` → ``nvmlDeviceRegisterEvents``; ``wait`` → ``nvmlEventSetWait``
  (a TIMEOUT is ``None``); ``close`` → ``nvmlEventSetFree``.
- the driver's per-cgroup memory accounting: ``memory_limits`` → ``nvmlDeviceGetMemoryLimits_v1``;
  ``set_memory_limits`` → ``nvmlDeviceSetMemoryLimits_v1`` (both take a cgroup's full sysfs path).

- dynamic MIG: ``gpu_instance_profiles`` → ``nvmlDeviceGetGpuInstanceProfileInfo`` (+ possible placements);
  ``gpu_instances`` → ``nvmlDeviceGetGpuInstances`` (+ their compute instances); ``create_gpu_instance``
  → ``nvmlDeviceCreateGpuInstanceWithPlacement``; ``create_compute_instance`` →
  ``nvmlGpuInstanceCreateComputeInstance``; ``destroy_compute_instance`` → ``nvmlComputeInstanceDestroy``;
  ``destroy_gpu_instance`` → ``nvmlGpuInstanceDestroy``.

Not covered: clock speeds, fan speed, per-process utilisation samples.

Backends: ``hami.core.nvml.real`` (pynvml) and ``hami.core.nvml.fake`` (``FakeNvml``). Select with
``open_nvml(kind)``; with ``kind="auto"`` the environment decides: ``HAMI_NVML=fake`` plus
``HAMI_FAKE_NVML_SPEC=<yaml>`` give the fake, anything else the real library.

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from hami.core.nvml.api import (
    CLOCK_EVENT_REASONS,
    EVENT_DOUBLE_BIT_ECC,
    EVENT_SINGLE_BIT_ECC,
    EVENT_XID_CRITICAL,
    HEALTH_EVENTS,
    MEMORY_LIMIT_MAX,
    NO_INSTANCE,
    GpuInstanceInfo,
    GpuInstanceProfile,
    MemoryInfo,
    MemoryLimits,
    MigDeviceInfo,
    NvLinkRemote,
    Nvml,
    NvmlDevice,
    NvmlError,
    NvmlEventSet,
    ProcessInfo,
    RemappedRows,
    RetiredPages,
    Utilization,
    XidEvent,
)

ENV_KIND = "HAMI_NVML"
ENV_FAKE_SPEC = "HAMI_FAKE_NVML_SPEC"

__all__ = [
    "CLOCK_EVENT_REASONS",
    "ENV_FAKE_SPEC",
    "ENV_KIND",
    "EVENT_DOUBLE_BIT_ECC",
    "EVENT_SINGLE_BIT_ECC",
    "EVENT_XID_CRITICAL",
    "HEALTH_EVENTS",
    "MEMORY_LIMIT_MAX",
    "NO_INSTANCE",
    "GpuInstanceInfo",
    "GpuInstanceProfile",
    "MemoryInfo",
    "MemoryLimits",
    "MigDeviceInfo",
    "NvLinkRemote",
    "Nvml",
    "NvmlDevice",
    "NvmlError",
    "NvmlEventSet",
    "ProcessInfo",
    "RemappedRows",
    "RetiredPages",
    "Utilization",
    "XidEvent",
    "open_nvml",
]


def open_nvml(kind: Literal["auto", "real", "fake"] = "auto", fake_spec: str | Path | None = None) -> Nvml:
    """An initialised NVML session. Raises ``NvmlError(call="nvmlInit")`` when NVML cannot start,
    and ``ValueError`` for a bad ``kind`` or a fake without a spec."""
    if kind == "auto":
        env = os.environ.get(ENV_KIND, "real").strip().lower() or "real"
        if env not in ("real", "fake", "auto"):
            raise ValueError(f"{ENV_KIND}={env!r}: want 'real' or 'fake'")
        kind = "fake" if env == "fake" else "real"
    if kind == "fake":
        from hami.core.nvml.fake import FakeNvml

        spec = fake_spec if fake_spec is not None else os.environ.get(ENV_FAKE_SPEC)
        if not spec:
            raise ValueError(f"the fake NVML needs a spec: pass fake_spec or set {ENV_FAKE_SPEC}")
        return FakeNvml(spec)
    if kind == "real":
        from hami.core.nvml.real import RealNvml

        return RealNvml()
    raise ValueError(f"unknown NVML kind {kind!r}: want 'auto', 'real' or 'fake'")
