"""A cgroup v2 tree on disk, as the kubelet lays pod containers out and the kernel's dmem controller
writes its files, for the monitor to read through its own code path (``hami.exporter.cgroupfs``).

The root holds ``cgroup.controllers`` (``dmem`` listed when the controller is on) and
``dmem.capacity``; each container directory ``dmem.current``, ``dmem.min``, ``dmem.low`` and
``dmem.max``, one ``<region> <value>`` line per region, ``max`` for no limit, as
Documentation/admin-guide/cgroup-v2.rst describes them. Regions are named ``drm/<PCI bus id>/vram0``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from hami.exporter.dmem import bus_id

MIB = 1 << 20


def region_of(pci_bus_id: str) -> str:
    """The dmem region of the GPU at ``pci_bus_id`` (NVML's spelling accepted)."""
    return f"drm/{bus_id(pci_bus_id)}/vram0"


@dataclass(frozen=True)
class Limits:
    used: int = 0
    soft: int = 0  # dmem.min
    hard: int | None = None  # dmem.max; None = max


class CgroupTree:
    def __init__(
        self, root: str | Path, *, dmem: bool = True, capacity: dict[str, int] | None = None
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        controllers = "cpuset cpu io memory hugetlb pids rdma misc" + (" dmem" if dmem else "")
        (self.root / "cgroup.controllers").write_text(controllers + "\n", encoding="utf-8")
        if dmem:
            lines = "".join(f"{region_of(pci)} {size}\n" for pci, size in sorted((capacity or {}).items()))
            (self.root / "dmem.capacity").write_text(lines, encoding="utf-8")
        self.dmem = dmem

    @staticmethod
    def container_rel(pod_uid: str, container_id: str, qos: str = "burstable", systemd: bool = True) -> str:
        """The kubelet's path of a container cgroup under the root (containerd runtime)."""
        if systemd:
            pod = f"kubepods-{qos}-pod{pod_uid.replace('-', '_')}.slice"
            return f"kubepods.slice/kubepods-{qos}.slice/{pod}/cri-containerd-{container_id}.scope"
        return f"kubepods/{qos}/pod{pod_uid}/{container_id}"

    def add_container(
        self,
        pod_uid: str,
        container_id: str,
        devices: dict[str, Limits] | None = None,
        *,
        systemd: bool = True,
    ) -> Path:
        """A container cgroup; ``devices``: PCI bus id -> its dmem accounting (dmem trees only)."""
        path = self.root / self.container_rel(pod_uid, container_id, systemd=systemd)
        path.mkdir(parents=True, exist_ok=True)
        (path / "cgroup.procs").write_text("", encoding="utf-8")
        self.set_dmem(path, devices or {})
        return path

    def set_dmem(self, path: Path, devices: dict[str, Limits]) -> None:
        """Rewrite the container's dmem files (each file replaced whole, as a reader sees the kernel's)."""
        if not self.dmem:
            return
        rows = sorted((region_of(pci), lim) for pci, lim in devices.items())
        files: dict[str, list[str]] = {"current": [], "min": [], "low": [], "max": []}
        for region, lim in rows:
            files["current"].append(f"{region} {lim.used}\n")
            files["min"].append(f"{region} {lim.soft}\n")
            files["low"].append(f"{region} 0\n")
            files["max"].append(f"{region} {'max' if lim.hard is None else lim.hard}\n")
        for name, lines in files.items():
            tmp = path / f".dmem.{name}.tmp"
            tmp.write_text("".join(lines), encoding="utf-8")
            os.replace(tmp, path / f"dmem.{name}")

    def remove(self, path: Path) -> None:
        """The container exits: its cgroup goes."""
        shutil.rmtree(path, ignore_errors=True)
