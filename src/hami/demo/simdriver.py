"""The driver's per-container memory accounting on the simulated node: what a driver with per-cgroup
limits and a kernel with the dmem controller would show the monitor.

Every pod container the runtime has named (a ``containerID`` in its status) gets a cgroup v2 directory
under ``--cgroup-root`` (``hami.testing.cgrouptree``, with dmem files) that the fake NVML knows too. The
driver accounts to it what the container holds on its GPU: its region's use, or its process's when it
runs without HAMi-core. Two scenarios:

* ``scenarios/driver-limited`` (``cluster.DRIVER_LIMITED``) runs on driver-node, whose device plugin
  runs ``--memory-enforcement=driver``: the ``NVIDIA_GPU_MEMORY_LIMIT``/``_REQUEST`` its Allocate gave
  (the runtime's env, ``hami.testing.kubelet.runtime_env``) are applied here as the container toolkit's
  hook applies them, as the cgroup's hard and soft limits (``nvmlDeviceSetMemoryLimits_v1``,
  ``dmem.max``/``min``). HAMi-core still runs in it, without a memory limit, so its region reports
  the use beside the driver's accounting. It is limited, so HAMiVGPUNotLimited stays quiet for it.
* ``scenarios/shim-underreports`` (``cluster.SHIM_UNDERREPORTS``) runs HAMi-core, and allocates
  ``BYPASS`` more than its region reports (through an API the shim does not hook): the driver accounts
  it, and HAMiVGPUShimUnderReports fires.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from hami.core.nvml.fake import FakeNvml
from hami.testing import cluster
from hami.testing.cgrouptree import CgroupTree, Limits

MIB = 1 << 20
BYPASS = 1536 * MIB  # what the under-reporting container allocates past HAMi-core
LIMIT_ENV, REQUEST_ENV = "NVIDIA_GPU_MEMORY_LIMIT", "NVIDIA_GPU_MEMORY_REQUEST"


def hook_limits(env: Mapping[str, str]) -> tuple[int, int | None]:
    """(soft, hard) in bytes as the toolkit's hook would apply the container's variables (whole MiB);
    (0, None) when it has none."""
    hard = int(env[LIMIT_ENV]) * MIB if env.get(LIMIT_ENV, "").isdigit() else None
    soft = int(env[REQUEST_ENV]) * MIB if env.get(REQUEST_ENV, "").isdigit() else 0
    return soft, hard


class DriverAccounting:
    """``env_of``: a container ID's environment as its runtime created it (what the hook reads)."""

    def __init__(
        self, root: str | Path, nvml: FakeNvml, gpus: int, env_of: Callable[[str], Mapping[str, str]]
    ) -> None:
        self.tree = CgroupTree(root)
        self._nvml = nvml
        self._env_of = env_of
        self._bus = [nvml.device(g).pci_bus_id() for g in range(gpus)]
        self._paths: dict[tuple[str, str], Path] = {}  # (pod uid, container) -> its cgroup

    def sync(
        self, pods: Iterable[Mapping[str, Any]], used: Mapping[tuple[str, str], tuple[int, int]]
    ) -> None:
        """``used``: (pod uid, container) -> (GPU index, bytes it holds there as its process sees it)."""
        seen: set[tuple[str, str]] = set()
        for pod in pods:
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid", ""))
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                name = str(status.get("name", ""))
                cid = str(status.get("containerID", "")).rpartition("://")[2]
                if not cid or (uid, name) not in used:
                    continue
                gpu, held = used[(uid, name)]
                if meta.get("name") == cluster.SHIM_UNDERREPORTS.name:
                    held += BYPASS
                soft, hard = hook_limits(self._env_of(cid))
                self._account((uid, name), cid, gpu, Limits(held, soft, hard))
                seen.add((uid, name))
        for key in set(self._paths) - seen:
            path = str(self._paths.pop(key))
            self._nvml.remove_cgroup(path)
            self.tree.remove(Path(path))

    def _account(self, key: tuple[str, str], cid: str, gpu: int, limits: Limits) -> None:
        path = self._paths.get(key)
        if path is None:
            path = self._paths[key] = self.tree.add_container(key[0], cid)
            self._nvml.add_cgroup(str(path))
            if limits.hard is not None:
                self._nvml.device(gpu).set_memory_limits(str(path), limits.soft, limits.hard)
        self.tree.set_dmem(path, {self._bus[gpu]: limits})
        self._nvml.set_cgroup_usage(gpu, str(path), limits.used)
