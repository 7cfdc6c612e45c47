"""Node checks: the guides' batch annotation check and register field checks, as pure functions.

Input is a Node as the API returns it (a dict); output is findings and the decoded device table.
The handshake and node lock checks that ``check_node`` runs are in ``nodeprotocol``.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from hami.core import annotations as ann
from hami.core.codec import CodecError
from hami.core.codec.node_devices import decode_legacy_node_devices, get_node_devices
from hami.core.devices import DeviceInfo
from hami.core.objects import annotations_of, name_of
from hami.doctor.findings import BROKEN, OK, WARNING, Finding, Section, Table
from hami.doctor.nodeprotocol import (
    FIX_VERSIONS,
    allocatable_gpus,
    check_node_handshake,
    check_node_lock,
)
from hami.doctor.settings import DEVICE_PLUGIN_LOGS, GET_DEVICE_PLUGIN, Settings

Obj = dict[str, Any]

UUID_RE = re.compile(r"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# The guide's columns, then who enforces the card's memory limits (our registration's memoryEnforcement).
GUIDE_COLUMNS = ("ID", "Index", "Count", "Devmem", "Devcore", "Type", "Numa", "Mode", "Health")
DEVICE_COLUMNS = (*GUIDE_COLUMNS, "Enforcement")

FIX_DEVICE_PLUGIN = (
    "check that the device plugin pod on the node is running (docs/guides/device-plugin-debugging.md §4.1)"
)
FIX_HEALTH = "check the GPU: nvidia-smi -q -d HEALTH and -d ECC on the node"


def check_registration(node: Obj) -> tuple[list[Finding], list[DeviceInfo]]:
    annos = annotations_of(node)
    text = annos.get(ann.NODE_REGISTER, "")
    gpus = allocatable_gpus(node)
    if not text:
        if gpus > 0:
            return [
                Finding(
                    BROKEN,
                    "node.register.missing",
                    f"kubelet reports {gpus} allocatable {ann.RESOURCE_GPU} "
                    f"but {ann.NODE_REGISTER} is absent",
                    (f"{ann.NODE_REGISTER}: <absent>",),
                    "the device plugin registered with kubelet but could not patch the node: check that its "
                    "ServiceAccount may patch nodes and that NODE_NAME matches the node",
                )
            ], []
        return [
            Finding(
                WARNING,
                "node.register.missing",
                f"GPU not registered ({ann.NODE_REGISTER} is absent or empty)",
                (f"{ann.NODE_REGISTER}: <absent>", f"allocatable {ann.RESOURCE_GPU}: 0"),
                FIX_DEVICE_PLUGIN + "; ignore this on CPU-only nodes, or narrow the check with --selector",
            )
        ], []
    try:
        devs = get_node_devices(annos, annos.get(ann.NODE_PAIR_SCORE))
    except CodecError as exc:
        evidence = [f"decode error: {exc}", f"{ann.NODE_REGISTER}: {_clip(text)}"]
        try:
            decode_legacy_node_devices(text)
            evidence.append(
                "the value is the legacy colon/comma form of a <= v2.7 device plugin; v2.10 reads JSON only"
            )
        except CodecError:
            pass
        return [
            Finding(
                BROKEN,
                "node.register.undecodable",
                "device registration cannot be decoded: the scheduler skips this node",
                tuple(evidence),
                FIX_VERSIONS,
            )
        ], []
    return [Finding(OK, "node.register.ok", f"GPU registered: {len(devs)} device(s)")], devs


def check_devices(devs: list[DeviceInfo]) -> list[Finding]:
    """The register field checks of the device-plugin guide (§4.2), plus device health."""
    out: list[Finding] = []
    for d in devs:
        label = f"device {d.index} ({d.id or '<no id>'})"
        if not UUID_RE.fullmatch(d.id):
            out.append(
                Finding(
                    WARNING,
                    "node.device.uuid",
                    f"{label}: ID is not a full GPU UUID",
                    (f"id={d.id!r}, want GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",),
                    "UUID selection (nvidia.com/use-gpuuuid) and the device plugin's matching "
                    "need real UUIDs: check the device plugin's NVML view",
                )
            )
        if d.count <= 0:
            out.append(
                Finding(
                    BROKEN,
                    "node.device.count",
                    f"{label}: Count must be > 0",
                    (f"count={d.count}",),
                    "set deviceSplitCount > 0 in the device plugin config",
                )
            )
        if d.devmem <= 0:
            out.append(
                Finding(
                    BROKEN,
                    "node.device.devmem",
                    f"{label}: Devmem must be > 0 (MiB)",
                    (f"devmem={d.devmem}",),
                    "check deviceMemoryScaling and, for unified-memory GPUs, "
                    "preConfiguredDeviceMemory",
                )
            )
        if not d.type.startswith("NVIDIA"):
            seen = "nvidia" in d.type.lower()
            out.append(
                Finding(
                    WARNING if seen else BROKEN,
                    "node.device.type",
                    f"{label}: Type must start with NVIDIA",
                    (f"type={d.type!r}",)
                    + (() if seen else ("the scheduler only fits devices whose type contains NVIDIA",)),
                    FIX_VERSIONS,
                )
            )
        if not d.health:
            out.append(
                Finding(
                    WARNING,
                    "node.device.unhealthy",
                    f"{label}: registered unhealthy",
                    (f"health={str(d.health).lower()}",),
                    FIX_HEALTH,
                )
            )
    if devs and not out:
        out.append(Finding(OK, "node.device.ok", "every device passes the register checks"))
    return out


def device_table(node: str, devs: list[DeviceInfo]) -> Table:
    rows = tuple(
        (
            d.id,
            str(d.index),
            str(d.count),
            str(d.devmem),
            str(d.devcore),
            d.type,
            str(d.numa),
            d.mode or "-",
            "true" if d.health else "false",
            d.enforcement or "hami-core",
        )
        for d in devs
    )
    return Table(f"devices on {node}", DEVICE_COLUMNS, rows)


# Finding codes → the reason the scheduler gives in hami_scheduler_node_schedulable, in its order.
_UNSCHEDULABLE = (
    ("handshake_expired", frozenset({"node.handshake.expired"})),
    ("decode_error", frozenset({"node.register.undecodable"})),
    ("no_devices", frozenset({"node.register.missing"})),
    ("node_lock", frozenset({"node.lock.malformed", "node.lock.held", "node.lock.stuck"})),
)


def schedulable_reason(findings: list[Finding], devs: list[DeviceInfo]) -> str:
    """The scheduler's verdict on the node as its own metric names it: ``ok`` or why not."""
    codes = {f.code for f in findings}
    for reason, match in _UNSCHEDULABLE[:3]:
        if codes & match:
            return reason
    nvidia = [d for d in devs if "nvidia" in d.type.lower()]
    if not nvidia:
        return "no_devices"
    if not any(d.health for d in nvidia):
        return "unhealthy"
    return "node_lock" if codes & _UNSCHEDULABLE[3][1] else "ok"


def _pod_line(p: Obj) -> tuple[bool, str]:
    meta, status = p.get("metadata") or {}, p.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    restarts = sum(int(cs.get("restartCount", 0)) for cs in status.get("containerStatuses") or [])
    phase = status.get("phase", "Unknown")
    text = (
        f"{meta.get('namespace', '')}/{meta.get('name', '')}: phase {phase}, ready {str(ready).lower()}, "
        f"restarts {restarts}"
    )
    return phase == "Running" and ready, text


def check_device_plugin(node: Obj, plugin_pods: list[Obj] | None) -> list[Finding]:
    """The device plugin pod on this node. Nothing is said when the plugin's pods cannot be
    listed, or when none exists anywhere (it may run under labels of its own), or for a node that
    neither registers nor offers GPUs."""
    if not plugin_pods:
        return []
    name = name_of(node)
    here = [p for p in plugin_pods if (p.get("spec") or {}).get("nodeName") == name]
    if not here:
        if ann.NODE_REGISTER not in annotations_of(node) and not allocatable_gpus(node):
            return []
        return [
            Finding(
                WARNING,
                "node.device-plugin.missing",
                "no device plugin pod runs on this node, though it has GPUs",
                (f"device plugin pods run on: {', '.join(sorted({_node_of(p) for p in plugin_pods}))}",),
                f"check the node's labels against the DaemonSet's nodeSelector (gpu=on): {GET_DEVICE_PLUGIN}",
            )
        ]
    states = [_pod_line(p) for p in here]
    evidence = tuple(text for _, text in states)
    if not any(ok for ok, _ in states):
        return [
            Finding(
                BROKEN,
                "node.device-plugin.not-running",
                "the device plugin pod on this node is not running and ready",
                evidence,
                f"read its logs: {DEVICE_PLUGIN_LOGS}",
            )
        ]
    return [Finding(OK, "node.device-plugin.running", "the device plugin runs on this node", evidence)]


def _node_of(p: Obj) -> str:
    return str((p.get("spec") or {}).get("nodeName") or "<unscheduled>")


def check_node(
    node: Obj, owner_exists: bool | None, s: Settings, now: datetime, plugin_pods: list[Obj] | None = None
) -> Section:
    section = Section(f"node {name_of(node)}")
    findings, devs = check_registration(node)
    section.findings += check_device_plugin(node, plugin_pods)
    section.findings += findings
    section.findings += check_devices(devs)
    if devs:
        section.tables.append(device_table(name_of(node), devs))
    section.findings += check_node_handshake(node, s, now)
    section.findings += check_node_lock(node, owner_exists, s, now)[0]
    reason = schedulable_reason(section.findings, devs)
    verdict = "places GPU pods on this node" if reason == "ok" else f"places no GPU pod here ({reason})"
    section.findings.append(
        Finding(
            OK,
            "node.schedulable",
            f"the scheduler {verdict}",
            (f'hami_scheduler_node_schedulable{{node="{name_of(node)}"}} reason: {reason}',),
        )
    )
    return section


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
