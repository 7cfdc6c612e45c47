"""Where HAMi-core lives on a node and what turns it off in a container
(docs/design/node-agent-region.md §A.7, docs/design/node-agent-device-plugin.md §C.7).

The device plugin mounts these files into every vGPU container; the monitor and hami-doctor look
for them when a container's GPU use is not limited.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CONTAINER_LOCK_DIR = "/tmp/vgpulock"
DISABLE_CONTROL_ENV = "CUDA_DISABLE_CONTROL"  # true: no ld.so.preload, so HAMi-core is not loaded


def parse_go_bool(text: str) -> bool:
    """Go ``strconv.ParseBool`` truth values; anything unparsable counts as false."""
    return text in {"1", "t", "T", "TRUE", "true", "True"}


def control_disabled(container: Mapping[str, Any]) -> bool:
    """Whether a container spec sets ``CUDA_DISABLE_CONTROL`` true (HAMi skips the preload mount)."""
    for env in container.get("env") or []:
        if isinstance(env, Mapping) and env.get("name") == DISABLE_CONTROL_ENV:
            return parse_go_bool(str(env.get("value", "")))
    return False


@dataclass(frozen=True)
class HostLayout:
    """Host paths of HAMi-core (``HOOK_PATH``, default /usr/local) and the shared lock dir."""

    hook_path: str = "/usr/local"
    lock_dir: str = CONTAINER_LOCK_DIR

    @property
    def vgpu_dir(self) -> str:
        return f"{self.hook_path}/vgpu"

    def cache_dir(self, pod_uid: str, container: str) -> str:
        return f"{self.vgpu_dir}/containers/{pod_uid}_{container}"

    def lib_candidates(self, plugin_version: str) -> tuple[str, str]:
        """Versioned libvgpu first (``GetLibPath``), then the plain name."""
        return f"{self.vgpu_dir}/libvgpu.so.{plugin_version}", f"{self.vgpu_dir}/libvgpu.so"

    @property
    def preload_path(self) -> str:
        """The host file mounted at the container's /etc/ld.so.preload."""
        return f"{self.vgpu_dir}/ld.so.preload"

    @property
    def license_path(self) -> str:
        return f"{self.vgpu_dir}/license"
