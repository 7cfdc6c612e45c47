"""``hami-tune --output patch``: the recommendations as a merge patch of HAMi's device configuration.

The device configuration is one YAML document inside a ConfigMap key (``device-config.yaml``), so a
merge patch must carry the whole document: this takes the current one (``--device-config FILE``),
sets ``nvidia.deviceSplitCount`` and ``nvidia.deviceMemoryScaling``, and ``nvidia.gpuCorePolicy`` and
``nvidia.libCudaLogLevel`` where a rule changes them, and leaves every other field as it was. Per-node
scaling goes to the device plugin's node configuration (``nodeconfig`` entries). The scheduler's flags
and the components' resources and arguments are not part of either; they are listed as comments
(``--output values`` sets them in the chart).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from hami.tune import components, cores
from hami.tune.recommend import Recommendation

# parameter -> (field of the nvidia section, its type, written only when the rule changes it). The
# two policies' current values come from --values or the chart's defaults, not from this file: a rule
# that keeps "its" current must not overwrite what the file says.
DEVICE_FIELDS: dict[str, tuple[str, type, bool]] = {
    "deviceSplitCount": ("deviceSplitCount", int, False),
    "deviceMemoryScaling": ("deviceMemoryScaling", float, False),
    cores.POLICY: ("gpuCorePolicy", str, True),
    components.LOG_LEVEL: ("libCudaLogLevel", int, True),
}
CONFIG_KEY = "device-config.yaml"
NODE_CONFIG_KEY = "config.json"


class PatchError(ValueError):
    """The current configuration cannot be patched; the message says what to pass."""


def _device_config(current: str, recs: list[Recommendation]) -> tuple[str, list[str]]:
    doc = yaml.safe_load(current) if current.strip() else {}
    if not isinstance(doc, dict) or not isinstance(doc.get("nvidia", {}), dict):
        raise PatchError("the device configuration must be a YAML mapping with an nvidia: section")
    nvidia: dict[str, Any] = doc.setdefault("nvidia", {})
    changed = []
    for rec in recs:
        spec = DEVICE_FIELDS.get(rec.parameter)
        if spec is None or rec.value is None:
            continue
        name, kind, only_changes = spec
        if only_changes and not rec.changed:
            continue
        old = nvidia.get(name)
        nvidia[name] = kind(rec.value)
        changed.append(f"{name}: {old} -> {rec.value}")
    return yaml.safe_dump(doc, sort_keys=False), changed


def _node_config(current: str, recs: list[Recommendation]) -> str | None:
    per_node = {
        key.removeprefix("node/"): float(value)
        for rec in recs
        if rec.parameter == "deviceMemoryScaling" and rec.value is not None
        for key, value in rec.details.items()
        if key.startswith("node/")
    }
    if not per_node:
        return None
    doc = json.loads(current) if current.strip() else {}
    if not isinstance(doc, dict) or not isinstance(doc.get("nodeconfig", []), list):
        raise PatchError("the node configuration must be a JSON object with a nodeconfig list")
    entries: list[dict[str, Any]] = doc.setdefault("nodeconfig", [])
    for node, scaling in sorted(per_node.items()):
        entry = next((e for e in entries if isinstance(e, dict) and e.get("name") == node), None)
        if entry is None:
            entries.append(entry := {"name": node})
        entry["devicememoryscaling"] = scaling
    return json.dumps(doc, indent=2) + "\n"


def render(
    recs: list[Recommendation], device_config: str, node_config: str | None, names: tuple[str, str, str]
) -> str:
    """YAML merge patches for ``names`` = (namespace, device ConfigMap, node-config ConfigMap)."""
    namespace, device_cm, node_cm = names
    text, changed = _device_config(device_config, recs)
    out = [
        "# hami-tune recommendations as merge patches; apply each document with",
        f"#   kubectl -n {namespace} patch configmap <name> --type merge --patch-file <file>",
        *(f"# {line}" for line in changed or ["no device-config change recommended"]),
    ]
    flags = [r for r in recs if r.value is not None and r.parameter not in DEVICE_FIELDS]
    out += [
        f"# not in the device config (--output values sets it in the chart): {r.parameter} {r.value}"
        for r in flags
        if r.changed
    ]
    out += [f"# refused, left as it is: {r.parameter}" for r in recs if r.value is None]
    patch = {"metadata": {"name": device_cm, "namespace": namespace}, "data": {CONFIG_KEY: text}}
    out.append(yaml.safe_dump(patch, sort_keys=False).rstrip())
    nodes = _node_config(node_config or "", recs) if node_config is not None else None
    if node_config is None:
        out += [
            f"# per-node {k.removeprefix('node/')}: deviceMemoryScaling {v} (pass --node-config to patch it)"
            for r in recs
            if r.parameter == "deviceMemoryScaling" and r.value is not None
            for k, v in r.details.items()
            if k.startswith("node/")
        ]
    if nodes is not None:
        out.append("---")
        node_patch = {"metadata": {"name": node_cm, "namespace": namespace}, "data": {NODE_CONFIG_KEY: nodes}}
        out.append(yaml.safe_dump(node_patch, sort_keys=False).rstrip())
    return "\n".join(out) + "\n"
