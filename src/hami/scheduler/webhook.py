"""The mutating admission webhook (§8): AdmissionReview v1 or v1beta1 in, a JSON patch out.

``admit`` is pure: it takes the decoded AdmissionReview and returns the response review.
Implemented from HAMi's NVIDIA ``MutateAdmission``: gpumem-percentage validation, priority env,
``defaultGPUNum`` and exclusive-core defaulting, ``NVIDIA_VISIBLE_DEVICES=none`` is not injected
(HAMi's ``overwriteEnv`` is off by default), privileged containers denied, scheduler name set,
quota pre-check.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hami.scheduler.device_config import NvidiaConfig
from hami.scheduler.quota import QuotaManager
from hami.scheduler.requests import container_request, int_quantity, pod_quota_demand, webhook_limits

Obj = dict[str, Any]
DEFAULT_SCHEDULER = "default-scheduler"
ADMISSION_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


class AdmissionError(ValueError):
    """The body is not an AdmissionReview with a pod (answered with HTTP 400)."""


@dataclass(frozen=True)
class WebhookConfig:
    scheduler_name: str = ""
    force_overwrite_default_scheduler: bool = True
    nvidia: NvidiaConfig = field(default_factory=NvidiaConfig)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def json_patch(old: Any, new: Any, path: str = "") -> list[Obj]:
    """RFC 6902 operations turning ``old`` into ``new`` (objects recursed, lists replaced whole)."""
    if isinstance(old, dict) and isinstance(new, dict):
        ops: list[Obj] = []
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, value in new.items():
            if key not in old:
                ops.append({"op": "add", "path": f"{path}/{_escape(key)}", "value": value})
            elif old[key] != value:
                ops.extend(json_patch(old[key], value, f"{path}/{_escape(key)}"))
        return ops
    if old == new:
        return []
    return [{"op": "replace", "path": path, "value": new}]


def _set_env(container: Obj, name: str, value: str) -> None:
    env = container.setdefault("env", [])
    env[:] = [e for e in env if not (isinstance(e, Mapping) and e.get("name") == name)]
    env.append({"name": name, "value": value})


def _mutate_container(container: Obj, cfg: NvidiaConfig) -> bool:
    """HAMi NVIDIA ``MutateAdmission`` for one container; True when it has GPU resources."""
    raw_resources = container.get("resources")
    resources: Obj = raw_resources if isinstance(raw_resources, dict) else {}
    raw_limits, raw_requests = resources.get("limits"), resources.get("requests")
    limits: Obj = raw_limits if isinstance(raw_limits, dict) else {}
    requests: Obj = raw_requests if isinstance(raw_requests, dict) else {}
    name = container.get("name", "")
    pct_name = cfg.resource_memory_percentage_name
    for section in (limits, requests):
        if pct_name in section:
            pct = int_quantity(section[pct_name])
            if pct is None or not 0 <= pct <= 100:
                raise ValueError(
                    f"invalid {pct_name} value {section[pct_name]} in container {name}: "
                    "must be an integer between 0 and 100"
                )
    if cfg.resource_priority_name in limits:
        _set_env(container, "CUDA_TASK_PRIORITY", str(limits[cfg.resource_priority_name]))
    added = webhook_limits(container, cfg)
    if added:
        new_limits = dict(limits)
        new_limits.update({k: str(v) for k, v in added.items()})
        container.setdefault("resources", {})["limits"] = new_limits
    return cfg.resource_count_name in (container.get("resources") or {}).get("limits", {}) or bool(added)


def _response(
    review: Mapping[str, Any],
    allowed: bool,
    message: str = "",
    code: int = 200,
    patch: list[Obj] | None = None,
) -> Obj:
    """controller-runtime's response: ``status`` always present (``Complete`` defaults the code to
    200), reason ``Forbidden`` on a denial, and the request's AdmissionReview version echoed (the
    chart registers v1beta1; an API server rejects a reply in another version)."""
    status: Obj = {"metadata": {}, "code": code}
    if code == 403:
        status["reason"] = "Forbidden"
    if message:
        status["message"] = message
    request = review.get("request") or {}
    response: Obj = {"uid": str(request.get("uid", "")), "allowed": allowed, "status": status}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    version = review.get("apiVersion")
    if version not in ADMISSION_VERSIONS:
        version = ADMISSION_VERSIONS[0]
    return {"apiVersion": version, "kind": "AdmissionReview", "response": response}


def admit(review: Any, cfg: WebhookConfig, quotas: QuotaManager | None) -> Obj:
    """Answer one AdmissionReview (§8 steps 1–7)."""
    if not isinstance(review, Mapping) or not isinstance(review.get("request"), Mapping):
        raise AdmissionError("body is not an AdmissionReview with a request")
    request = review["request"]
    pod = request.get("object")
    if not isinstance(pod, Mapping) or not isinstance(pod.get("spec"), Mapping):
        raise AdmissionError("AdmissionReview request.object is not a Pod")
    spec = pod["spec"]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return _response(review, False, "pod has no containers", 403)
    current = spec.get("schedulerName")
    if (
        current
        and (current != DEFAULT_SCHEDULER or not cfg.force_overwrite_default_scheduler)
        and (not cfg.scheduler_name or cfg.scheduler_name != current)
    ):
        return _response(review, True, "pod already has different scheduler assigned")
    mutated = copy.deepcopy(dict(pod))
    mspec = mutated["spec"]
    has_resource = False
    everything = [c for c in (mspec.get("initContainers") or []) if isinstance(c, dict)]
    everything += [c for c in mspec["containers"] if isinstance(c, dict)]
    for container in everything:
        try:
            has_resource = _mutate_container(container, cfg.nvidia) or has_resource
        except ValueError as err:
            return _response(review, False, str(err), 500)
    if not has_resource:
        return _response(review, True, patch=json_patch(dict(pod), mutated))
    for container in everything:
        if (container.get("securityContext") or {}).get("privileged"):
            return _response(review, False, f"container {container.get('name', '')} is privileged", 403)
    if cfg.scheduler_name:
        mspec["schedulerName"] = cfg.scheduler_name
        if mspec.get("nodeName"):
            return _response(review, False, "pod has node assigned", 403)
    if quotas is not None:
        init = [c for c in (mspec.get("initContainers") or []) if isinstance(c, dict)]
        reqs = tuple(container_request(c, cfg.nvidia) for c in everything)
        mem, cores = pod_quota_demand(reqs, len(init))
        namespace = str((pod.get("metadata") or {}).get("namespace") or request.get("namespace") or "")
        if (mem or cores) and not quotas.fits(namespace, mem, cores):
            return _response(review, False, "exceeding resource quota", 403)
    return _response(review, True, patch=json_patch(dict(pod), mutated))
