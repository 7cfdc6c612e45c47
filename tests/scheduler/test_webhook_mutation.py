"""The pure admission mutation (§8 step 3 and the rules around it) and the JSON patch it answers.

Every patch is applied with the API emulator's RFC 6902 implementation, an applier written
independently of the webhook's diff, and the result compared with the expected pod.

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.scheduler.engine.admission import AdmissionError, WebhookConfig, admit, json_patch
from hami.scheduler.engine.device_config import DeviceConfigError, NvidiaConfig, load_nvidia_config
from hami.testing.kubeapi.patch import json_patch as apply_json_patch

Obj = dict[str, Any]


def _container(name: str, limits: dict[str, str] | None = None, env: list[Obj] | None = None) -> Obj:
    c: Obj = {"name": name, "image": "x"}
    if limits is not None:
        c["resources"] = {"limits": limits}
    if env is not None:
        c["env"] = env
    return c


def _pod(*containers: Obj, init: tuple[Obj, ...] = (), **spec: Any) -> Obj:
    body: Obj = {"containers": list(containers), **spec}
    if init:
        body["initContainers"] = list(init)
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": body}


def _admit(pod: Obj, **nvidia: Any) -> Obj:
    review = {"apiVersion": "admission.k8s.io/v1", "request": {"uid": "u", "object": pod}}
    response: Obj = admit(review, WebhookConfig("hami-scheduler", True, NvidiaConfig(**nvidia)), None)[
        "response"
    ]
    return response


def _ops(response: Obj) -> list[Obj]:
    assert response["allowed"] is True, response
    if "patch" not in response:
        return []
    ops: list[Obj] = json.loads(base64.b64decode(response["patch"]))
    return ops


def _mutated(pod: Obj, **nvidia: Any) -> Obj:
    original = copy.deepcopy(pod)
    result: Obj = apply_json_patch(pod, _ops(_admit(pod, **nvidia)))
    assert pod == original, "admit must not mutate its input"
    return result


def _env(pod: Obj, index: int = 0, key: str = "containers") -> list[tuple[str, str]]:
    return [(e["name"], e["value"]) for e in pod["spec"][key][index].get("env", [])]


GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}
POLICY = "GPU_CORE_UTILIZATION_POLICY"


def test_core_policy_env_goes_to_every_container_after_the_priority_env() -> None:
    pod = _pod(
        _container("gpu", {**GPU, "nvidia.com/priority": "1"}, env=[{"name": "A", "value": "a"}]),
        _container("cpu", {"cpu": "1"}),
        init=(_container("setup"),),
    )
    after = _mutated(pod, gpu_core_policy="force")
    assert _env(after) == [("A", "a"), ("CUDA_TASK_PRIORITY", "1"), (POLICY, "force")]
    # HAMi appends the policy before looking at resources: GPU-less containers get it too.
    assert _env(after, 1) == [(POLICY, "force")]
    assert _env(after, 0, "initContainers") == [(POLICY, "force")]


@pytest.mark.parametrize("policy", ["default", ""])
def test_default_or_empty_core_policy_adds_no_env(policy: str) -> None:
    after = _mutated(_pod(_container("gpu", GPU)), gpu_core_policy=policy)
    assert _env(after) == []


def test_core_policy_alone_mutates_a_pod_without_hami_resources() -> None:
    pod = _pod(_container("cpu", {"cpu": "1"}), schedulerName="default-scheduler")
    after = _mutated(pod, gpu_core_policy="disable")
    assert _env(after) == [(POLICY, "disable")]
    assert after["spec"]["schedulerName"] == "default-scheduler"  # not a HAMi pod: not rerouted


def _runtime_class(pod: Obj, **nvidia: Any) -> str | None:
    value: str | None = _mutated(pod, **nvidia)["spec"].get("runtimeClassName")
    return value


def test_runtime_class_is_set_only_on_pods_with_hami_resources_that_name_none() -> None:
    assert _runtime_class(_pod(_container("gpu", GPU)), runtime_class_name="nvidia") == "nvidia"
    # defaultGPUNum and exclusive-core defaulting make a container a HAMi consumer too.
    mem_only = _pod(_container("c", {"nvidia.com/gpumem": "1000"}))
    assert _runtime_class(mem_only, runtime_class_name="nvidia") == "nvidia"
    requests_only = _pod({"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}})
    assert _runtime_class(requests_only, runtime_class_name="nvidia") == "nvidia"
    # A pod's own class stays, even an empty one (a non-nil pointer in Go).
    for own in ("kata", ""):
        named = _pod(_container("gpu", GPU), runtimeClassName=own)
        assert _runtime_class(named, runtime_class_name="nvidia") == own
    assert _runtime_class(_pod(_container("cpu", {"cpu": "1"})), runtime_class_name="nvidia") is None
    assert _runtime_class(_pod(_container("gpu", GPU))) is None


def test_overwrite_env_hides_gpus_from_containers_without_hami_resources() -> None:
    pod = _pod(
        _container("gpu", GPU),
        _container("cpu", {"cpu": "1"}, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
        _container("bare"),
        _container("mem-only", {"nvidia.com/gpumem": "1000"}),  # gets nvidia.com/gpu: 1
        init=(_container("setup"),),
    )
    after = _mutated(pod, overwrite_env=True, gpu_core_policy="force")
    assert _env(after, 0) == [(POLICY, "force")]
    # Appended after the user's own entry, like HAMi: the last definition wins in the container.
    hidden = [(POLICY, "force"), ("NVIDIA_VISIBLE_DEVICES", "none")]
    assert _env(after, 1) == [("NVIDIA_VISIBLE_DEVICES", "all"), *hidden]
    assert _env(after, 2) == hidden
    assert _env(after, 3) == [(POLICY, "force")]
    assert _env(after, 0, "initContainers") == hidden
    assert _env(_mutated(pod), 2) == []  # off by default


def test_overwrite_env_applies_to_pods_without_any_hami_resource() -> None:
    after = _mutated(_pod(_container("cpu", {"cpu": "1"})), overwrite_env=True)
    assert _env(after) == [("NVIDIA_VISIBLE_DEVICES", "none")]


def test_env_patch_adds_the_list_when_absent_and_appends_when_present() -> None:
    pod = _pod(_container("a", GPU), _container("b", GPU, env=[{"name": "X", "value": "1"}]))
    ops = _ops(_admit(pod, gpu_core_policy="force"))
    entry = {"name": POLICY, "value": "force"}
    assert {"op": "add", "path": "/spec/containers/0/env", "value": [entry]} in ops
    assert {"op": "add", "path": "/spec/containers/1/env/1", "value": entry} in ops
    assert not any(op["path"] == "/spec/containers" for op in ops)


def test_env_that_is_not_a_list_is_a_bad_request() -> None:
    with pytest.raises(AdmissionError, match="env is not a list"):
        _admit(_pod(_container("a", GPU, env={"X": "1"})), gpu_core_policy="force")  # type: ignore[arg-type]


def test_pod_without_spec_is_denied_like_one_without_containers() -> None:
    response = _admit({"metadata": {"name": "p"}})
    assert (response["allowed"], response["status"]["message"]) == (False, "pod has no containers")
    with pytest.raises(AdmissionError):
        _admit({"metadata": {"name": "p"}, "spec": "x"})


def test_privileged_container_is_denied_only_when_the_pod_has_hami_resources() -> None:
    priv = {"securityContext": {"privileged": True}}
    response = _admit(_pod(_container("gpu", GPU), init=({**_container("setup"), **priv},)))
    assert (response["allowed"], response["status"]["message"]) == (False, "container setup is privileged")
    assert _admit(_pod({**_container("cpu"), **priv}), overwrite_env=True)["allowed"] is True


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["", "a", "b/c", "d~e"]),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["k", "l/m", "n~o", "p"]), inner, max_size=4),
    max_leaves=12,
)


@given(old=st.dictionaries(st.sampled_from(["a", "b", "c/d"]), _json_values, max_size=3),
       new=st.dictionaries(st.sampled_from(["a", "b", "c/d"]), _json_values, max_size=3))
def test_json_patch_turns_old_into_new(old: Obj, new: Obj) -> None:
    assert apply_json_patch(old, json_patch(old, new)) == new


def test_device_config_webhook_fields() -> None:
    default = NvidiaConfig()
    assert (default.gpu_core_policy, default.runtime_class_name, default.overwrite_env) == (
        "default", "", False
    )
    section = {"gpuCorePolicy": "force", "runtimeClassName": "nvidia", "overwriteEnv": True,
               "defaultGPUNum": 2}
    cfg = load_nvidia_config({"nvidia": section})
    assert (cfg.gpu_core_policy, cfg.runtime_class_name, cfg.overwrite_env, cfg.default_gpu_num) == (
        "force", "nvidia", True, 2
    )
    with pytest.raises(DeviceConfigError, match="overwriteEnv must be true or false"):
        load_nvidia_config({"nvidia": {"overwriteEnv": "yes"}})
    with pytest.raises(DeviceConfigError, match="gpuCorePolicy must be a string"):
        load_nvidia_config({"nvidia": {"gpuCorePolicy": 1}})
