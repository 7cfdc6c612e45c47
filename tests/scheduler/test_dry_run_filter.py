"""The dry-run filter as a pure function (§9.3): nodes decoded from their own annotations, zero
usage, the live scoring, a copy of the best node, nothing mutated.

Section signs (§) refer to docs/design/scheduler.md.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hami.scheduler.engine.decision import FilterConfig
from hami.scheduler.engine.device_config import NvidiaConfig
from hami.scheduler.engine.nodes import Unregistered, node_state
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.requests import pod_request
from hami.scheduler.engine.usage import DeviceShare
from hami.scheduler.extender.filter_service import dry_run, node_items, passthrough
from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.engineinputs import quota_snapshot

Obj = dict[str, Any]
CONFIG = FilterConfig(node_policy="binpack")


def _sim(pod: Obj, nodes: list[Obj], quotas: QuotaManager | None = None,
         config: FilterConfig = CONFIG) -> tuple[Obj, str]:
    before = copy.deepcopy(nodes), copy.deepcopy(pod)
    request = pod_request(pod, config.nvidia)
    assert request is not None, "a pod without a device request is passed through before the dry run"
    result = dry_run(request, nodes, quotas, config)
    assert (nodes, pod) == before, "a dry run must not touch its inputs"
    return result


def _unregistered(name: str, annotations: dict[str, Any]) -> Obj:
    return {"metadata": {"name": name, "annotations": annotations}}


def test_best_node_is_returned_as_a_copy_of_the_supplied_object() -> None:
    small, big = gpu_node("small", mem=4000), gpu_node("big", mem=16000)
    big["metadata"]["labels"] = {"node.kubernetes.io/instance-type": "g5.xlarge"}
    reply, outcome = _sim(gpu_pod("p", mem=3000), [small, big])
    assert outcome == "fit"
    # binpack over zero usage: every node scores 0, so both fit; HAMi returns exactly one.
    (chosen,) = reply["Nodes"]["items"]
    assert chosen in (small, big) and chosen is not small and chosen is not big
    assert reply == {
        "Nodes": {"metadata": {}, "items": [chosen]},
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": None,
        "Error": "",
    }
    reply, _ = _sim(gpu_pod("p", mem=6000), [small, big])
    assert reply["Nodes"]["items"] == [big]
    assert reply["FailedNodes"] == {"small": "2/2 CardInsufficientMemory"}


@pytest.mark.parametrize(
    "annotations",
    [
        {},
        {"hami.io/node-nvidia-register": "[]"},
        {"hami.io/node-nvidia-register": "not json"},
        {"hami.io/node-nvidia-register": 7},
        {**gpu_node("x")["metadata"]["annotations"], "hami.io/node-nvidia-score": "{bad"},
    ],
    ids=["no-register", "empty-list", "bad-json", "not-a-string", "bad-pair-score"],
)
def test_nodes_without_decodable_devices_are_unregistered(annotations: dict[str, Any]) -> None:
    reply, outcome = _sim(gpu_pod("p"), [_unregistered("template-a", annotations), gpu_node("ok")])
    assert outcome == "fit"
    assert reply["FailedNodes"] == {"template-a": "node unregistered"}
    assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["ok"]


def test_nothing_fits_answers_only_failed_nodes() -> None:
    reply, outcome = _sim(gpu_pod("p", mem=9000), [gpu_node("template-a"), _unregistered("bare", {})])
    assert outcome == "unschedulable"
    assert reply == {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": {"template-a": "2/2 CardInsufficientMemory", "bare": "node unregistered"},
        "FailedAndUnresolvableNodes": None,
        "Error": "",
    }


def test_cordon_annotation_of_the_supplied_node_applies() -> None:
    node = gpu_node("t", gpus=1, annotations={"hami.io/device-cordon": "GPU-t-0"})
    reply, _ = _sim(gpu_pod("p"), [node])
    assert reply["FailedNodes"] == {"t": "1/1 CardCordoned"}
    node["metadata"]["annotations"]["hami.io/device-cordon"] = " , "
    assert _sim(gpu_pod("p"), [node])[1] == "fit"


def test_invalid_scoring_weights_are_an_error() -> None:
    pod = gpu_pod("p")
    pod["metadata"]["annotations"] = {"hami.io/device-scoring-weights": "slot=1"}
    reply, outcome = _sim(pod, [gpu_node("t")])
    assert outcome == "error" and reply["Nodes"] is None and reply["FailedNodes"] is None
    assert reply["Error"].startswith("calcScore failed invalid hami.io/device-scoring-weights annotation")


def test_pod_without_hami_resources_echoes_every_node_sent() -> None:
    pod = gpu_pod("cpu", mem=None)
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    assert pod_request(pod, CONFIG.nvidia) is None
    reply = passthrough(None, [gpu_node("t"), gpu_node("u")])
    # docs/design/scheduler-filter.md §4.1 step 1 returns args.NodeNames (null for a caller that only sent
    # Nodes); Nodes is echoed
    # too, or that caller would read "fits nowhere".
    assert (reply["NodeNames"], reply["FailedNodes"]) == (None, None)
    assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["t", "u"]
    assert passthrough(["t"], [gpu_node("t")])["NodeNames"] == ["t"]
    # The live filter answers the names alone, as HAMi does.
    assert passthrough(["t"], None) == {"NodeNames": ["t"], "FailedNodes": None, "Error": ""}


def test_quota_is_read_and_left_alone() -> None:
    quotas = QuotaManager(NvidiaConfig())
    hard = {"limits.nvidia.com/gpumem": "4000"}
    quotas.add_quota({"metadata": {"namespace": "team"}, "spec": {"hard": hard}})
    quotas.add_usage("team", (DeviceShare("GPU-x", 1000, 0),))
    before = quota_snapshot(quotas)
    reply, outcome = _sim(gpu_pod("p", mem=3500, namespace="team"), [gpu_node("t")], quotas)
    assert outcome == "unschedulable" and reply["FailedNodes"] == {"t": "2/2 ResourceQuotaNotFit"}
    assert _sim(gpu_pod("p", mem=3000, namespace="team"), [gpu_node("t")], quotas)[1] == "fit"
    assert quota_snapshot(quotas) == before
    assert ("team", "nvidia.com/gpumem", 1000, 4000) in before


def test_node_state_and_node_items() -> None:
    state = node_state("t", gpu_node("t", gpus=3)["metadata"]["annotations"])
    assert not isinstance(state, Unregistered)
    assert (state.name, len(state.devices), state.devices[0].device_vendor) == ("t", 3, "NVIDIA")
    assert node_items({"Items": [{"metadata": {}}]}) == [{"metadata": {}}]
    assert node_items({"metadata": {}}) == []
    for bad in ([], {"items": {}}, {"items": [1]}):
        with pytest.raises(ValueError, match="Nodes"):
            node_items(bad)
