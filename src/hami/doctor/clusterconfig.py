"""The scheduling configuration as the cluster holds it, for ``hami-doctor snapshot``: the scheduler's
flags from its pods' command lines (else its Deployment's pod template), the device config from the
ConfigMap the scheduler and the device plugin mount (``hami-scheduler-device``, key
``device-config.yaml``), and per-node ``deviceMemoryScaling`` from the device plugin's node config
(ConfigMap ``hami-device-plugin``, key ``config.json``). Read-only; an object that is absent or
unreadable is reported as such, never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from hami.core import names
from hami.core.kube import errors, raw
from hami.core.objects import namespace_of
from hami.doctor import fetch

Obj = dict[str, Any]
NODE_CONFIG_KEY = "config.json"


@dataclass(frozen=True)
class ClusterConfig:
    scheduler_pods: list[Obj] = field(default_factory=list)  # or the Deployment's pod template
    device_config: Mapping[str, Any] | None = None  # the ``nvidia:`` section; None: not found
    node_scaling: Mapping[str, float] = field(default_factory=dict)  # nodeconfig devicememoryscaling


def _get(api: Any, path: str) -> Obj | None:
    try:
        obj: Obj = raw.request_json(api, "GET", path)
    except errors.NotFound:
        return None
    except errors.ApiError as exc:
        if exc.status in (401, 403):
            return None
        raise
    return obj


def nvidia_section(text: str) -> Mapping[str, Any] | None:
    """The ``nvidia:`` section of HAMi's device config YAML; None when the text has none."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    section = doc.get("nvidia") if isinstance(doc, Mapping) else None
    return dict(section) if isinstance(section, Mapping) else None


def node_scaling(text: str) -> dict[str, float]:
    """``devicememoryscaling`` of each exactly named ``nodeconfig`` entry of the plugin's config.json."""
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    entries = doc.get("nodeconfig") if isinstance(doc, Mapping) else None
    out: dict[str, float] = {}
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, Mapping):
            continue
        lowered = {str(k).lower(): v for k, v in entry.items()}
        name, factor = lowered.get("name"), lowered.get("devicememoryscaling")
        if isinstance(factor, bool) or not isinstance(factor, int | float):
            continue
        if isinstance(name, str) and factor > 0:
            out[name] = float(factor)
    return out


def read(api: Any, scheduler_namespace: str = "") -> ClusterConfig:
    pods = fetch.scheduler_pods(api, scheduler_namespace) or []
    namespace = scheduler_namespace or (namespace_of(pods[0]) if pods else names.NAMESPACE)
    if not pods:
        path = raw.resource_path("apps", "v1", "deployments", namespace, names.SCHEDULER_DEPLOYMENT)
        deployment = _get(api, path)
        template = ((deployment or {}).get("spec") or {}).get("template")
        if isinstance(template, Mapping):
            pods = [dict(template)]
    config = None
    device = _get(api, raw.resource_path("", "v1", "configmaps", namespace, names.DEVICE_CONFIGMAP))
    text = ((device or {}).get("data") or {}).get(names.DEVICE_CONFIG_KEY)
    if isinstance(text, str):
        config = nvidia_section(text)
    scaling: dict[str, float] = {}
    plugin = _get(api, raw.resource_path("", "v1", "configmaps", namespace, names.NODE_CONFIGMAP))
    text = ((plugin or {}).get("data") or {}).get(NODE_CONFIG_KEY)
    if isinstance(text, str):
        scaling = node_scaling(text)
    return ClusterConfig(pods, config, scaling)
