"""How Allocate names the GPUs to the container runtime (``--device-list-strategy``), and the CDI spec.

NVIDIA's four strategies, any combination of them:

- ``envvar``: ``NVIDIA_VISIBLE_DEVICES=<ids>``, for the NVIDIA container runtime hook;
- ``volume-mounts``: ``NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices`` and one ``/dev/null``
  mount per device under that directory, so an unprivileged pod cannot widen the list by its env;
- ``cdi-annotations``: the annotation ``<prefix>nvidia-device-plugin_<response id>`` listing the
  fully qualified CDI names (``k8s.device-plugin.nvidia.com/gpu=<id>``), for runtimes that read it;
- ``cdi-cri``: the same names in the response's ``cdi_devices`` (Kubernetes 1.28+).

The CDI names resolve through a spec the plugin writes for the node's devices where runtimes look
(``/var/run/cdi``): one device per GPU under its UUID and under its index, and ``all``; each carries
its ``/dev/nvidia<minor>`` node, and every device shares the control nodes and the driver files found
under the driver root. nvidia-ctk's spec also adds ldcache and symlink hooks, which this one leaves
out. Pure: facts in, documents out (``specdir`` writes the file).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

ENVVAR = "envvar"
VOLUME_MOUNTS = "volume-mounts"
CDI_ANNOTATIONS = "cdi-annotations"
CDI_CRI = "cdi-cri"
STRATEGIES = (ENVVAR, VOLUME_MOUNTS, CDI_ANNOTATIONS, CDI_CRI)
CDI_STRATEGIES = frozenset({CDI_ANNOTATIONS, CDI_CRI})

VOLUME_MOUNTS_ROOT = "/var/run/nvidia-container-devices"
VOLUME_MOUNTS_HOST_PATH = "/dev/null"
CDI_VERSION = "0.5.0"
VENDOR = "k8s.device-plugin.nvidia.com"
GPU_KIND = f"{VENDOR}/gpu"
IMEX_KIND = f"{VENDOR}/imex-channel"
ANNOTATION_PREFIX = "cdi.k8s.io/"
ANNOTATION_PLUGIN = "nvidia-device-plugin"
SPEC_FILE = "k8s.device-plugin.nvidia.com-gpu.json"
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
_KEY_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def parse_strategies(text: str) -> tuple[str, ...]:
    """``--device-list-strategy``: one or more of ``STRATEGIES``, comma-separated."""
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown or not names:
        raise ValueError(
            f"--device-list-strategy: {', '.join(unknown) or 'empty'} is not one of {', '.join(STRATEGIES)}"
        )
    return names


def qualified(kind: str, name: str) -> str:
    return f"{kind}={name}"


def annotation(prefix: str, response_id: str, devices: Sequence[str]) -> dict[str, str]:
    """The CDI device annotation: ``<prefix><plugin>_<response id>`` → comma-joined names."""
    name = f"{ANNOTATION_PLUGIN}_{response_id.replace('/', '_')}"
    if len(name) > 63 or not _KEY_NAME.fullmatch(name):
        raise ValueError(f"CDI annotation name {name!r} is not a valid annotation key name")
    return {f"{prefix}{name}": ",".join(devices)}


@dataclass(frozen=True)
class DeviceListEdits:
    """What the strategies add to one container's response."""

    envs: dict[str, str]
    mounts: tuple[tuple[str, str], ...]  # (container path, host path), read-only
    annotations: dict[str, str]
    cdi_devices: tuple[str, ...]


def device_list_edits(
    strategies: Sequence[str],
    ids: Sequence[str],
    imex_channels: Sequence[int],
    response_id: str,
    annotation_prefix: str = ANNOTATION_PREFIX,
) -> DeviceListEdits:
    """The edits for devices ``ids`` (UUIDs or indexes, by ``--device-id-strategy``)."""
    envs: dict[str, str] = {}
    mounts: tuple[tuple[str, str], ...] = ()
    if ENVVAR in strategies:
        envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(ids)
    if VOLUME_MOUNTS in strategies:
        envs["NVIDIA_VISIBLE_DEVICES"] = VOLUME_MOUNTS_ROOT
        mounts = tuple((f"{VOLUME_MOUNTS_ROOT}/{i}", VOLUME_MOUNTS_HOST_PATH) for i in ids)
    names = [qualified(GPU_KIND, i) for i in ids] + [qualified(IMEX_KIND, str(c)) for c in imex_channels]
    annotations = (
        annotation(annotation_prefix, response_id, names) if CDI_ANNOTATIONS in strategies and names else {}
    )
    cdi_devices = tuple(names) if CDI_CRI in strategies else ()
    return DeviceListEdits(envs, mounts, annotations, cdi_devices)


@dataclass(frozen=True)
class SpecGpu:
    uuid: str
    index: int
    minor: int


def _node(path: str, dev_root: str) -> dict[str, str]:
    return {"path": path, "hostPath": f"{dev_root.rstrip('/')}{path}"}


def build_spec(
    gpus: Iterable[SpecGpu], dev_root: str, driver_root: str, driver_files: Iterable[str]
) -> dict[str, Any]:
    """The CDI spec of the node's GPUs; ``driver_files`` are host paths under ``driver_root``."""
    devices: list[dict[str, Any]] = []
    all_nodes = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        node = _node(f"/dev/nvidia{gpu.minor}", dev_root)
        all_nodes.append(node)
        for name in (gpu.uuid, str(gpu.index)):
            devices.append({"name": name, "containerEdits": {"deviceNodes": [node]}})
    devices.append({"name": "all", "containerEdits": {"deviceNodes": all_nodes}})
    root = driver_root.rstrip("/")
    mounts = [
        {
            "hostPath": path,
            "containerPath": path[len(root) :] if root and path.startswith(root + "/") else path,
            "options": ["ro", "nosuid", "nodev", "bind"],
        }
        for path in sorted(driver_files)
    ]
    edits: dict[str, Any] = {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [_node(path, dev_root) for path in CONTROL_NODES],
    }
    if mounts:
        edits["mounts"] = mounts
    return {"cdiVersion": CDI_VERSION, "kind": GPU_KIND, "devices": devices, "containerEdits": edits}
