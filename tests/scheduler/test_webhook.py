"""The mutating webhook over HTTP (§8): quota denial, gpumem-percentage, controller-runtime's
AdmissionReview shapes, schedulerName rewrite, pods without HAMi resources left alone, and the
device config's gpuCorePolicy / runtimeClassName / overwriteEnv applied through the API server.

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client

from hami.scheduler.extender.daemon import Extender
from hami.scheduler.extender.main import build_parser, options
from hami.testing.builders import gpu_pod
from hami.testing.extender import running, url
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.kubeapi.patch import json_patch as apply_json_patch
from hami.testing.wait import wait_until

V1 = "admission.k8s.io/v1"
V1BETA1 = "admission.k8s.io/v1beta1"


def _quota(namespace: str, hard: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu", "namespace": namespace},
        "spec": {"hard": hard},
    }


@pytest.fixture
def ext(kube_api: KubeAPIServer) -> Iterator[Extender]:
    kube_api.store.put(_quota("team", {"limits.nvidia.com/gpumem": "4000"}))
    kube_api.store.put(_quota("zero", {"limits.nvidia.com/gpumem": "0"}))
    with running(kube_api, scheduler_name="hami-scheduler") as extender:
        wait_until(lambda: len(extender.state.quotas.items()) == 2, what="quotas in cache")
        yield extender


def _review(ext: Extender, pod: dict[str, Any], version: str = V1, uid: str = "r1") -> dict[str, Any]:
    body = {
        "apiVersion": version,
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "namespace": pod["metadata"]["namespace"],
            "operation": "CREATE",
            "object": pod,
        },
    }
    r = requests.post(url(ext, "/webhook"), json=body, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/json"
    reply: dict[str, Any] = r.json()
    return reply


def _patch(reply: dict[str, Any]) -> list[dict[str, Any]]:
    response = reply["response"]
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return ops


def _limits_after(pod: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, str]:
    limits: dict[str, str] = apply_json_patch(pod, ops)["spec"]["containers"][0]["resources"]["limits"]
    return limits


def _denied(version: str, uid: str, code: int, message: str) -> dict[str, Any]:
    status: dict[str, Any] = {"metadata": {}, "code": code, "message": message}
    if code == 403:
        status["reason"] = "Forbidden"
    return {
        "apiVersion": version,
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": False, "status": status},
    }


def test_quota_denial_is_a_forbidden_review_in_the_requests_version(ext: Extender) -> None:
    within = gpu_pod("ok", gpus=1, mem=3000, namespace="team")
    assert _review(ext, within)["response"]["allowed"] is True
    over = gpu_pod("big", gpus=2, mem=3000, namespace="team")  # 2 × 3000 > 4000
    for version in (V1, V1BETA1):
        assert _review(ext, over, version, uid="r2") == _denied(
            version, "r2", 403, "exceeding resource quota"
        )
    # A namespace without a quota is not limited.
    assert _review(ext, gpu_pod("big", gpus=2, mem=3000, namespace="free"))["response"]["allowed"] is True


def test_percentage_only_memory_counts_zero_against_the_quota(ext: Extender) -> None:
    pct = gpu_pod("pct", mem=None, namespace="zero")
    pct["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] = "50"
    assert _review(ext, pct)["response"]["allowed"] is True
    fixed = gpu_pod("fixed", mem=1, namespace="zero")  # an explicit 0 limit blocks any memory
    assert _review(ext, fixed)["response"] == _denied(V1, "r1", 403, "exceeding resource quota")["response"]


@pytest.mark.parametrize("section", ["limits", "requests"])
@pytest.mark.parametrize("value", ["150", "-1", "abc"])
def test_gpumem_percentage_outside_0_to_100_is_an_errored_500(
    ext: Extender, section: str, value: str
) -> None:
    pod = gpu_pod("bad", mem=None)
    pod["spec"]["containers"][0]["resources"].setdefault(section, {})["nvidia.com/gpumem-percentage"] = value
    message = (
        f"invalid nvidia.com/gpumem-percentage value {value} in container c0: "
        "must be an integer between 0 and 100"
    )
    assert _review(ext, pod) == _denied(V1, "r1", 500, message)


def test_gpumem_percentage_defaults_the_gpu_count_and_stays_shareable_below_100(ext: Extender) -> None:
    pod = gpu_pod("p", mem=None)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    del limits["nvidia.com/gpu"]
    limits["nvidia.com/gpumem-percentage"] = "50"
    after = _limits_after(pod, _patch(_review(ext, pod)))
    assert after == {"nvidia.com/gpumem-percentage": "50", "nvidia.com/gpu": "1"}
    limits["nvidia.com/gpumem-percentage"] = "100"  # a whole card's memory: exclusive cores
    after = _limits_after(pod, _patch(_review(ext, pod)))
    assert after["nvidia.com/gpucores"] == "100"


def test_scheduler_name_is_rewritten_only_from_empty_or_default(ext: Extender) -> None:
    pod = gpu_pod("p")
    assert {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in _patch(
        _review(ext, pod)
    )
    pod["spec"]["schedulerName"] = "default-scheduler"
    assert {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"} in _patch(
        _review(ext, pod)
    )
    pod["spec"]["schedulerName"] = "volcano"
    reply = _review(ext, pod)
    assert reply["response"] == {
        "uid": "r1",
        "allowed": True,
        "status": {"metadata": {}, "code": 200, "message": "pod already has different scheduler assigned"},
    }
    pod["spec"]["schedulerName"] = "default-scheduler"
    pod["spec"]["nodeName"] = "n1"
    assert _review(ext, pod) == _denied(V1, "r1", 403, "pod has node assigned")


def test_force_overwrite_off_leaves_default_scheduler(kube_api: KubeAPIServer) -> None:
    with running(kube_api, scheduler_name="hami-scheduler", force_overwrite_default_scheduler=False) as ext:
        pod = gpu_pod("p")
        pod["spec"]["schedulerName"] = "default-scheduler"
        response = _review(ext, pod)["response"]
        assert "patch" not in response
        assert response["status"]["message"] == "pod already has different scheduler assigned"


def test_pod_without_hami_resources_is_untouched(ext: Extender) -> None:
    pod = gpu_pod("cpu")
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}  # allowed without GPUs
    pod["spec"]["schedulerName"] = "default-scheduler"
    assert _review(ext, pod, V1BETA1) == {
        "apiVersion": V1BETA1,
        "kind": "AdmissionReview",
        "response": {"uid": "r1", "allowed": True, "status": {"metadata": {}, "code": 200}},
    }


def test_pod_without_containers_is_denied(ext: Extender) -> None:
    pod = gpu_pod("empty")
    pod["spec"]["containers"] = []
    assert _review(ext, pod) == _denied(V1, "r1", 403, "pod has no containers")


DEVICE_CONFIG = """\
nvidia:
  resourceCountName: nvidia.com/gpu
  defaultGPUNum: 1
  gpuCorePolicy: force
  runtimeClassName: nvidia
  overwriteEnv: true
"""


def test_device_config_webhook_fields_reach_the_pod_through_the_api_server(
    kube_api: KubeAPIServer, kube_client: client.ApiClient, tmp_path: Path
) -> None:
    """--device-config-file → /webhook → the answered JSON patch applied by the API server."""
    config = tmp_path / "device-config.yaml"
    config.write_text(DEVICE_CONFIG, encoding="utf-8")
    opts = options(build_parser().parse_args(["--device-config-file", str(config)]))
    pod = gpu_pod("mixed", mem=None)
    pod["spec"]["containers"][0]["env"] = [{"name": "A", "value": "a"}]
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] = "50"
    pod["spec"]["containers"].append({"name": "sidecar", "image": "x"})
    pod["spec"]["initContainers"] = [{"name": "setup", "image": "x"}]
    cpu_only = gpu_pod("cpu", mem=None)
    cpu_only["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    core = client.CoreV1Api(kube_client)
    with running(kube_api, scheduler_name="hami-scheduler", filter=opts.filter) as ext:
        for original in (pod, cpu_only):
            stored = kube_api.store.put(original)
            ops = _patch(_review(ext, stored))
            core.patch_namespaced_pod(stored["metadata"]["name"], "default", ops)
    got = kube_api.store.get("pods", "mixed", "default")
    assert got is not None
    spec = got["spec"]
    assert (spec["schedulerName"], spec["runtimeClassName"]) == ("hami-scheduler", "nvidia")

    def env(c: dict[str, Any]) -> list[tuple[str, str]]:
        return [(e["name"], e["value"]) for e in c.get("env", [])]

    gpu, sidecar = spec["containers"]
    assert env(gpu) == [("A", "a"), ("GPU_CORE_UTILIZATION_POLICY", "force")]
    assert gpu["resources"]["limits"] == {"nvidia.com/gpumem-percentage": "50", "nvidia.com/gpu": "1"}
    hidden = [("GPU_CORE_UTILIZATION_POLICY", "force"), ("NVIDIA_VISIBLE_DEVICES", "none")]
    assert env(sidecar) == hidden and env(spec["initContainers"][0]) == hidden
    plain = kube_api.store.get("pods", "cpu", "default")
    assert plain is not None
    assert env(plain["spec"]["containers"][0]) == hidden
    assert "runtimeClassName" not in plain["spec"] and "schedulerName" not in plain["spec"]
