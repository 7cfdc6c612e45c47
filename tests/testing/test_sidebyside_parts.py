"""The side-by-side harness's pure parts, without HAMi: the pod stream covers what it promises, and
the metric comparison reports each kind of difference."""

from __future__ import annotations

from hami.core import annotations as ann
from hami.testing import metricdiff, podstream
from hami.testing.sidebyside import Q1, QUOTA_INIT, Outcome, added_event, known_difference


def test_the_stream_is_seeded_and_covers_every_variation() -> None:
    steps = podstream.stream(29, 2000)
    assert steps == podstream.stream(29, 2000) and steps != podstream.stream(30, 2000)
    pods = [s.pod for s in steps]
    notes = [p["metadata"]["annotations"] for p in pods]
    limits = [c["resources"]["limits"] for p in pods for c in p["spec"]["containers"]]
    for key in (ann.POD_USE_GPUTYPE, ann.POD_NOUSE_GPUTYPE, ann.POD_USE_GPUUUID, ann.POD_NOUSE_GPUUUID,
                ann.POD_NUMA_BIND):  # fmt: skip
        assert any(key in n for n in notes), key
    assert {n.get(ann.POD_GPU_SCHEDULER_POLICY) for n in notes} >= {"binpack", "spread", "topology-aware"}
    assert {n.get(ann.POD_NODE_SCHEDULER_POLICY) for n in notes} >= {"binpack", "spread"}
    assert {lim.get(ann.RESOURCE_GPUCORES) for lim in limits} >= {"100", "120"}
    assert any(ann.RESOURCE_GPUMEM_PERCENTAGE in lim for lim in limits)
    assert any(p["spec"].get("initContainers") for p in pods)
    assert any(p["metadata"]["namespace"] == podstream.QUOTA_NS for p in pods)
    deleted = [k for s in steps for k in s.delete]
    assert len(deleted) == len(set(deleted)) > 1500  # each pod leaves once, most within the stream


def test_nodes_carry_the_register_and_pair_score_annotations() -> None:
    from datetime import UTC, datetime

    nodes = podstream.cluster_nodes(datetime(2026, 1, 1, tzinfo=UTC))
    assert len(nodes) == len(podstream.CLUSTER)
    assert all(ann.NODE_REGISTER in n["metadata"]["annotations"] for n in nodes)
    assert sum(ann.NODE_PAIR_SCORE in n["metadata"]["annotations"] for n in nodes) == 2


def _pod(init: bool = False, cores: str = "50") -> dict:
    lim = {ann.RESOURCE_GPU: "1", ann.RESOURCE_GPUCORES: cores}
    spec: dict = {"containers": [{"name": "m", "resources": {"limits": lim}}]}
    if init:
        spec["initContainers"] = [{"name": "i", "resources": {"limits": {ann.RESOURCE_GPU: "1"}}}]
    return {"metadata": {"name": "p", "namespace": "q"}, "spec": spec}


def test_known_differences_are_named_and_nothing_else_is() -> None:
    h = Outcome("n", "GPU-a,NVIDIA,1024,50:;", (), "")
    assert known_difference(_pod(), h, Outcome("n", "GPU-a,NVIDIA,1024,50:;;", (), "")) == Q1
    refused = Outcome("", "", (), "container m: nvidia.com/gpucores 120 is more than 100")
    # We clamp gpucores 120 as HAMi does: a refusal would be a regression, never a documented difference.
    assert known_difference(_pod(cores="120"), h, refused) == ""
    quota = Outcome("", "", (("n", "1/1 ResourceQuotaNotFit"),), "")
    assert known_difference(_pod(init=True), h, quota) == QUOTA_INIT
    assert known_difference(_pod(), h, quota) == ""
    assert known_difference(_pod(), h, Outcome("m", "GPU-b,NVIDIA,1024,50:;", (), "")) == ""


REF = """# TYPE a gauge
a{x="1"} 1
# TYPE b_total counter
b_total{x="1"} 2
# TYPE c gauge
c{x="1"} 3
# TYPE d gauge
d{x="1"} 4
# TYPE e gauge
e{x="1"} 5
"""
OURS = """# TYPE a gauge
a{x="1"} 1
# TYPE b gauge
b_total{x="1"} 2
# TYPE c gauge
c{x="1",y="2"} 3
# TYPE d gauge
d{x="1"} 40
# TYPE extra gauge
extra 1
"""


def test_metric_comparison_reports_each_kind_of_difference() -> None:
    rows = {r.name: r.status for r in metricdiff.compare(metricdiff.families(REF), metricdiff.families(OURS))}
    assert rows == {"a": "same", "b_total": "type", "c": "labels", "d": "values", "e": "missing"}


def test_only_the_events_we_add_on_purpose_are_left_out_of_the_comparison() -> None:
    clamped = ("Warning", "GPUCoresClamped", "container main: nvidia.com/gpucores 120 is more than 100")
    extra = ("Warning", "FilteringFailed", "Bindingfailed: CardInsufficientMemory on node n1")
    assert added_event(clamped) and added_event(extra)
    assert not added_event(("Warning", "FilteringFailed", "1 nodes CardInsufficientMemory(n1)"))
    assert not added_event(("Normal", "BindingSucceed", "GPUCoresClamped"))
