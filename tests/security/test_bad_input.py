"""Whatever body reaches the extender or the webhook, the answer is a 4xx with a message or a
scheduling answer, never a 500; GPU resource values that cannot be meant are refused with a reason."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from hami.scheduler.extender.daemon import Extender

Path_ = tuple[str | int, ...]
WRONG_TYPES: tuple[Any, ...] = (5, "x", [], {}, None, True, [1], {"a": 1})


def pod(**limits: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u1",
                     "annotations": {"nvidia.com/use-gputype": "A100"}, "labels": {"app": "x"}},
        "spec": {
            "initContainers": [{"name": "i", "env": [{"name": "A", "value": "b"}],
                                "securityContext": {"privileged": False}}],
            "containers": [{"name": "c", "resources": {"limits": {
                "nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", **limits}}}],
        },
        "status": {"phase": "Pending"},
    }


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "r1", "namespace": "default", "object": obj}}


def paths(value: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from paths(child, (*prefix, i))


def replaced(value: Any, path: Path_, new: Any) -> Any:
    if not path:
        return new
    out = copy.deepcopy(value)
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = new
    return out


def post(ext: Extender, path: str, body: Any) -> requests.Response:
    assert ext.http is not None
    return requests.post(ext.http.url + path, data=json.dumps(body), timeout=30)


@pytest.mark.parametrize("endpoint", ["/filter", "/webhook"])
def test_a_wrong_json_type_anywhere_is_never_a_500(extender: Extender, endpoint: str) -> None:
    body = {"Pod": pod(), "NodeNames": ["n1"]} if endpoint == "/filter" else review(pod())
    with requests.Session() as session:
        for path in paths(body):
            for wrong in WRONG_TYPES:
                assert extender.http is not None
                r = session.post(extender.http.url + endpoint, data=json.dumps(replaced(body, path, wrong)),
                                 timeout=30)
                assert r.status_code < 500, (path, wrong, r.text)
                if r.status_code == 400:
                    assert r.json()["Error"], (path, wrong)


@pytest.mark.parametrize("endpoint", ["/filter", "/bind", "/webhook"])
def test_deep_nesting_is_a_400_that_says_so(extender: Extender, endpoint: str) -> None:
    assert extender.http is not None
    for depth in (100, 100_000):
        r = requests.post(extender.http.url + endpoint, data="[" * depth + "]" * depth, timeout=30)
        assert r.status_code == 400 and "nested more than" in r.json()["Error"]


@pytest.mark.parametrize(("where", "value", "field"), [
    (("metadata", "annotations", "nvidia.com/use-gputype"), 5, "annotations"),
    (("spec", "initContainers"), 5, "initContainers"),
    (("spec", "containers", 0, "resources", "limits"), ["1"], "limits"),
])
def test_named_type_errors_are_400s_naming_the_field(
    extender: Extender, where: Path_, value: Any, field: str
) -> None:
    bad = replaced(pod(), where, value)
    for endpoint, body in (("/filter", {"Pod": bad, "NodeNames": ["n1"]}), ("/webhook", review(bad))):
        r = post(extender, endpoint, body)
        assert r.status_code == 400 and field in r.json()["Error"], (endpoint, r.text)


@pytest.mark.parametrize(("limits", "reason"), [
    ({"nvidia.com/gpucores": "-50"}, "nvidia.com/gpucores -50 is negative"),
    # gpucores above 100 is no problem: HAMi clamps it (tests/scheduler/test_core_clamp.py).
    ({"nvidia.com/gpucores": "5000000000"}, "nvidia.com/gpucores 5000000000 overflows int32"),
    ({"nvidia.com/gpucores": "lots"}, "nvidia.com/gpucores 'lots' is not a quantity"),
    ({"nvidia.com/gpu": "1e30"}, "nvidia.com/gpu 1e30 overflows int64"),
    ({"nvidia.com/gpumem": "-1"}, "nvidia.com/gpumem -1 is negative"),
    ({"nvidia.com/gpumem": "99999999999"}, "nvidia.com/gpumem 99999999999 is more than"),
    ({"nvidia.com/gpu": "-2"}, "nvidia.com/gpu -2 is negative"),
])
def test_negative_or_impossible_gpu_values_are_refused_with_a_reason(
    extender: Extender, limits: dict[str, str], reason: str
) -> None:
    asked = pod(**limits)
    r = post(extender, "/filter", {"Pod": asked, "NodeNames": ["n1"]})
    assert r.status_code == 200 and reason in r.json()["Error"] and not r.json().get("NodeNames")
    w = post(extender, "/webhook", review(asked))
    answer = w.json()["response"]
    assert w.status_code == 200 and answer["allowed"] is False and reason in answer["status"]["message"]
