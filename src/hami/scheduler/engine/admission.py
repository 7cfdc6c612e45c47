"""The mutating admission webhook (§8): AdmissionReview v1 or v1beta1 in, a JSON patch out.

``admit`` is pure: it takes the decoded AdmissionReview and returns the response review.
Implemented from HAMi's NVIDIA ``MutateAdmission``, per container (init containers first) in
HAMi's order: gpumem-percentage validation, ``CUDA_TASK_PRIORITY`` env, ``GPU_CORE_UTILIZATION_POLICY``
env (every container, GPU or not, when ``gpuCorePolicy`` is not ``default``), ``defaultGPUNum`` and
exclusive-core defaulting, the pod's ``runtimeClassName``, and ``NVIDIA_VISIBLE_DEVICES=none`` for
containers without HAMi resources when ``overwriteEnv`` is on. Then negative or impossible HAMi
resource values are refused (not in HAMi, which admits ``gpucores: -50``: see
``container_problems``); a ``gpucores`` above 100 is admitted as HAMi does, with an admission
warning that the scheduler takes it as 100 (``core_clamps``); privileged containers are denied,
the scheduler name is set and the quota is pre-checked. Env entries are appended like HAMi does
(a user's entry of the same name stays; the last definition wins in the container).

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hami.core.objects import namespace_of
from hami.scheduler.engine.device_config import DEFAULT_CORE_POLICY, NvidiaConfig
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.requests import (
    container_problems,
    core_clamps,
    int_quantity,
    pod_quota_demand,
    pod_requests,
    webhook_limits,
)

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
    """RFC 6902 operations turning ``old`` into ``new``.

    Objects are recursed; a list that keeps or grows its length is recursed element-wise and its
    new tail added by index (an env entry appended to a container is one ``add``); a list that
    shrinks is replaced whole.
    """
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
    if isinstance(old, list) and isinstance(new, list) and len(new) >= len(old):
        ops = []
        for i, (before, after) in enumerate(zip(old, new, strict=False)):
            ops.extend(json_patch(before, after, f"{path}/{i}"))
        for i in range(len(old), len(new)):
            ops.append({"op": "add", "path": f"{path}/{i}", "value": new[i]})
        return ops
    if old == new:
        return []
    return [{"op": "replace", "path": path, "value": new}]


def _add_env(container: Obj, name: str, value: str) -> None:
    env = container.get("env")
    if env is None:
        env = container["env"] = []
    elif not isinstance(env, list):
        raise AdmissionError(f"container {container.get('name', '')}: env is not a list")
    env.append({"name": name, "value": value})


def _mutate_container(container: Obj, spec: Obj, cfg: NvidiaConfig) -> bool:
    """HAMi NVIDIA ``MutateAdmission`` for one container (``spec`` is the pod's, for its
    runtimeClassName); True when the container has HAMi resources."""
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
        _add_env(container, "CUDA_TASK_PRIORITY", str(limits[cfg.resource_priority_name]))
    if cfg.gpu_core_policy and cfg.gpu_core_policy != DEFAULT_CORE_POLICY:
        _add_env(container, "GPU_CORE_UTILIZATION_POLICY", cfg.gpu_core_policy)
    added = webhook_limits(container, cfg)
    if added:
        new_limits = dict(limits)
        new_limits.update({k: str(v) for k, v in added.items()})
        container.setdefault("resources", {})["limits"] = new_limits
    has_resource = cfg.resource_count_name in limits or bool(added)
    if has_resource and spec.get("runtimeClassName") is None and cfg.runtime_class_name:
        spec["runtimeClassName"] = cfg.runtime_class_name
    if not has_resource and cfg.overwrite_env:
        _add_env(container, "NVIDIA_VISIBLE_DEVICES", "none")
    return has_resource


def _response(
    review: Mapping[str, Any],
    allowed: bool,
    message: str = "",
    code: int = 200,
    *,
    patch: list[Obj] | None = None,
    warnings: list[str] | None = None,
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
    if warnings:  # kubectl prints each as "Warning: ..." (admission warnings, Kubernetes 1.19)
        response["warnings"] = warnings
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    version = review.get("apiVersion")
    if version not in ADMISSION_VERSIONS:
        version = ADMISSION_VERSIONS[0]
    return {"apiVersion": version, "kind": "AdmissionReview", "response": response}


def admit(
    review: Any, cfg: WebhookConfig, quotas: QuotaManager | None, annotations: Mapping[str, str] | None = None
) -> Obj:
    """Answer one AdmissionReview (§8 steps 1–7). A pod that asks for a device also gets
    ``annotations`` (the trace context), replacing any it had of the same names."""
    if not isinstance(review, Mapping) or not isinstance(review.get("request"), Mapping):
        raise AdmissionError("body is not an AdmissionReview with a request")
    request = review["request"]
    pod = request.get("object")
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    if not isinstance(pod, Mapping) or not isinstance(spec, Mapping | None):
        raise AdmissionError("AdmissionReview request.object is not a Pod")
    containers = (spec or {}).get("containers")
    if not isinstance(containers, list | None):
        raise AdmissionError("AdmissionReview request.object spec.containers is not a list")
    if spec is None or not containers:  # Go decodes a missing spec as an empty one
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
            has_resource = _mutate_container(container, mspec, cfg.nvidia) or has_resource
        except AdmissionError:
            raise
        except ValueError as err:
            return _response(review, False, str(err), 500)
    problems = [p for c in everything for p in container_problems(c, cfg.nvidia)]
    if problems:
        return _response(review, False, "; ".join(problems), 400)
    if not has_resource:
        return _response(review, True, patch=json_patch(dict(pod), mutated))
    for container in everything:
        if (container.get("securityContext") or {}).get("privileged"):
            return _response(review, False, f"container {container.get('name', '')} is privileged", 403)
    if cfg.scheduler_name:
        mspec["schedulerName"] = cfg.scheduler_name
        if mspec.get("nodeName"):
            return _response(review, False, "pod has node assigned", 403)
    nvidia = cfg.nvidia
    if quotas is not None and (nvidia.resource_memory_name or nvidia.resource_core_name):
        mem, cores = pod_quota_demand(*pod_requests(mutated, nvidia))
        namespace = namespace_of(pod) or str(request.get("namespace") or "")
        if (mem or cores) and not quotas.fits(namespace, mem, cores):
            return _response(review, False, "exceeding resource quota", 403)
    clamps = [p for c in everything for p in core_clamps(c, nvidia)]
    if annotations:
        metadata = mutated.setdefault("metadata", {})
        metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
    return _response(review, True, patch=json_patch(dict(pod), mutated), warnings=clamps)
