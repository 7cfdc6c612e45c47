"""Tables for requests, webhook defaults, annotations, ordering, weights, reasons, usage, quota, config."""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import pytest

from hami.core import reasons as r
from hami.core.codec.node_devices import encode_node_devices
from hami.core.devices import ContainerDevice
from hami.scheduler.engine.device_config import DeviceConfigError, NvidiaConfig, load_nvidia_config
from hami.scheduler.engine.nodes import NodeState, Unregistered, node_state
from hami.scheduler.engine.policy import (
    ScoringWeightsError,
    Weights,
    device_sort_key,
    parse_gpu_policy,
    parse_scoring_weights,
    pick_node,
)
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.requests import (
    ContainerRequest,
    container_request,
    int_quantity,
    pod_options,
    pod_quota_demand,
    pod_request,
    pod_requests,
    webhook_limits,
)
from hami.scheduler.engine.score import node_score
from hami.scheduler.engine.usage import DeviceShare, collapse_init_containers
from hami.testing.builders import dev, pod, res
from tests.scheduler.vectors.filters import CASES
from tests.scheduler.vectors.fit import FIT_VECTORS

CR = ContainerRequest
LESS = "TestDeviceUsageList_Less/"
EXCL = "TestMutateAdmissionDefaultsExclusiveCore/"

REQUEST_VECTORS: list[tuple[str, dict[str, Any], NvidiaConfig, ContainerRequest | None]] = [
    ("TestGenerateResourceRequests/gpu_only", res(1), NvidiaConfig(), CR(1, 0, 100, 0)),
    ("TestGenerateResourceRequests/gpumem", res(2, 4096), NvidiaConfig(), CR(2, 4096, 101, 0)),
    ("TestGenerateResourceRequests/percentage_50", res(1, pct=50), NvidiaConfig(), CR(1, 0, 50, 0)),
    ("TestZeroMemoryPercentageIsAccountedAsWholeCard", res(1, pct=0), NvidiaConfig(),
     CR(1, 0, 100, 0)),
    ("TestGenerateResourceRequests/gpumem_and_zero_percentage", res(1, 2000, pct=0), NvidiaConfig(),
     CR(1, 2000, 101, 0)),
    ("TestGenerateResourceRequests/gpucores", res(1, cores=50), NvidiaConfig(), CR(1, 0, 100, 50)),
    ("TestGenerateResourceRequests/percentage_clamped", res(1, pct=150), NvidiaConfig(),
     CR(1, 0, 100, 0)),
    ("TestGenerateResourceRequests_MemoryFactor", res(1, 100), NvidiaConfig(memory_factor=10),
     CR(1, 1000, 101, 0)),
    ("TestGenerateResourceRequests_DefaultMemory", res(1), NvidiaConfig(default_memory=3000, default_cores=7),
     CR(1, 3000, 101, 7)),
    ("TestGenerateResourceRequests/16Gi_drops_request", res(1, "16Gi"), NvidiaConfig(), None),
    ("TestGenerateResourceRequests/fractional_gpumem_drops_request", res(1, "1.5"), NvidiaConfig(), None),
    ("TestGenerateResourceRequests/no_gpu", res(None, 1000), NvidiaConfig(), None),
    ("TestGenerateResourceRequests/fractional_gpu", res("500m"), NvidiaConfig(), None),
]


@pytest.mark.parametrize("row", REQUEST_VECTORS, ids=[row[0] for row in REQUEST_VECTORS])
def test_container_request(row: tuple[str, dict[str, Any], NvidiaConfig, ContainerRequest | None]) -> None:
    _, container, cfg, expected = row
    assert container_request(container, cfg) == expected


def test_requests_are_ordered_init_first_and_requests_section_is_read() -> None:
    """TestResourcereqs_*: init containers first, empty entries for non-GPU containers."""
    app = {"resources": {"requests": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100"}}}
    reqs, n_init = pod_requests(pod({"resources": {}}, app, init=(res(1, 50),)), NvidiaConfig())
    assert n_init == 1
    assert reqs == (CR(1, 50, 101, 0), None, CR(1, 100, 101, 0))


WEBHOOK_VECTORS: list[tuple[str, dict[str, Any], dict[str, int]]] = [
    (EXCL + "gpu_only", res(1), {"nvidia.com/gpucores": 100}),
    (EXCL + "percentage_100", res(1, pct=100), {"nvidia.com/gpucores": 100}),
    (EXCL + "percentage_50_shareable", res(1, pct=50), {}),
    (EXCL + "gpumem_shareable", res(1, 1000), {}),
    (EXCL + "cores_given", res(1, cores=30), {}),
    ("Test_MutateAdmission/default_gpu_num", res(None, 1000), {"nvidia.com/gpu": 1}),
    ("Test_MutateAdmission/no_resources", {"resources": {}}, {}),
]


@pytest.mark.parametrize("row", WEBHOOK_VECTORS, ids=[row[0] for row in WEBHOOK_VECTORS])
def test_webhook_limits(row: tuple[str, dict[str, Any], dict[str, int]]) -> None:
    assert webhook_limits(row[1], NvidiaConfig()) == row[2]


def test_webhook_quota_demand_counts_init_peak() -> None:
    """webhook_test quota denial: effective = max(Σ app, max init); percentage counts 0."""
    the_pod = pod(res(2, 1000), res(1, pct=50), init=(res(1, 3000), res(1, 500)))
    reqs, n_init = pod_requests(the_pod, NvidiaConfig())
    assert pod_quota_demand(reqs, n_init) == (3000, 0)


def test_pod_request_decodes_once_and_decides_the_pass_through() -> None:
    the_pod = pod(res(1, 1000), res(None), init=(res(2, 500),), annotations={"nvidia.com/numa-bind": "true"},
                  uid="u-7", namespace="team", name="train")
    request = pod_request(the_pod, NvidiaConfig())
    assert request is not None
    assert (request.uid, request.namespace, request.name, request.n_init) == ("u-7", "team", "train", 1)
    assert request.reqs == (CR(2, 500, 101, 0), CR(1, 1000, 101, 0), None) and request.options.numa_bind
    assert request.locks_node
    # Only an init container asks: the filter places the pod, bind takes no node lock (HAMi LockNode).
    init_only = pod_request(pod(res(None), init=(res(1),)), NvidiaConfig())
    assert init_only is not None and not init_only.locks_node
    assert pod_request(pod(res(None), res("500m")), NvidiaConfig()) is None


@pytest.mark.parametrize(
    "junk",
    [{"spec": {"containers": [7, None, "c"]}}, {"spec": []}, {"metadata": [], "spec": {"containers": [{}]}},
     {"metadata": {"annotations": {"nvidia.com/numa-bind": ["x"]}, "name": 5},
      "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}],
)
def test_pod_request_reads_any_json_without_raising(junk: dict[str, Any]) -> None:
    request = pod_request(junk, NvidiaConfig())
    assert request is None or (request.name == "" and not request.options.numa_bind)


def _annotations(**extra: str) -> dict[str, str]:
    return {"hami.io/node-nvidia-register": encode_node_devices([dev("g0"), dev("g1")]), **extra}


@pytest.mark.parametrize(
    ("annotations", "source", "reason"),
    [
        ({}, "", "annos not found hami.io/node-nvidia-register"),
        ({"hami.io/node-nvidia-register": "[]"}, "", "no gpu found on node"),
        ({"hami.io/node-nvidia-register": "not json"}, "node_register", ""),
        (_annotations(**{"hami.io/node-nvidia-score": "{bad"}), "node_pair_score", ""),
    ],
    ids=["no-register", "empty-list", "bad-register", "bad-pair-score"],
)
def test_node_state_says_why_a_node_is_unregistered(annotations: dict[str, str], source: str,
                                                    reason: str) -> None:
    got = node_state("n", annotations)
    assert isinstance(got, Unregistered) and got.source == source
    assert got.reason.startswith(reason) and got.reason


def test_node_state_of_registered_devices_and_cordon() -> None:
    got = node_state("n", _annotations(**{"hami.io/device-cordon": " g1 , ,"}))
    assert isinstance(got, NodeState)
    assert (got.name, [d.id for d in got.devices], got.cordoned) == ("n", ["g0", "g1"], frozenset({"g1"}))


def test_check_type_and_uuid_parsing() -> None:
    """TestCheckType / TestCheckUUID / TestAssertNuma."""
    opts = pod_options(pod(res(1), annotations={
        "nvidia.com/use-gputype": " a100 , h100,", "nvidia.com/nouse-gpuuuid": "GPU-1, GPU-2 ",
        "nvidia.com/numa-bind": "True"}))
    assert opts.use_types == ("A100", "H100") and opts.numa_bind
    assert opts.type_ok("NVIDIA A100-SXM4-40GB", "hami-core") and not opts.type_ok("Tesla T4", "hami-core")
    assert not opts.uuid_ok("GPU-2") and opts.uuid_ok("GPU-3")
    blank = pod_options(pod(res(1), annotations={"nvidia.com/use-gputype": " ", "nvidia.com/numa-bind": "y"}))
    assert blank.type_ok("anything", "mig") and not blank.numa_bind
    mode = pod_options(pod(res(1), annotations={"nvidia.com/vgpu-mode": "hami-core"}))
    assert mode.type_ok("x", "hami-core") and not mode.type_ok("x", "mig")


def order(policy: str, numa_bind: bool, scores: list[float], numas: list[int], useds: list[int]) -> list[int]:
    """Positions in the order Fit tries them (the sorted list walked from the end)."""
    key = device_sort_key(parse_gpu_policy(policy), numa_bind, scores=scores, numas=numas, useds=useds,
                          indexes=list(range(len(scores))))
    return list(reversed(sorted(range(len(scores)), key=key)))


LESS_VECTORS: list[tuple[str, str, bool, list[float], list[int], list[int], list[int]]] = [
    (LESS + "spread_least_used_first", "spread", False, [5, 1, 3], [0, 0, 0], [0, 0, 0],
     [1, 2, 0]),
    (LESS + "binpack_most_used_first", "binpack", False, [5, 1, 3], [0, 0, 0], [0, 0, 0],
     [0, 2, 1]),
    (LESS + "tie_higher_numa_first", "spread", False, [1, 1], [0, 1], [0, 0], [1, 0]),
    (LESS + "mutex_idle_first", "mutex", False, [0, 0, 0], [0, 0, 0], [2, 0, 1], [1, 2, 0]),
    (LESS + "numa_bind_spread", "spread", True, [1, 9, 5], [1, 0, 0], [0, 0, 0], [0, 2, 1]),
    (LESS + "numa_bind_binpack", "binpack", True, [1, 9, 5], [1, 0, 0], [0, 0, 0], [1, 2, 0]),
    (LESS + "chain_binpack_numa", "binpack,numa", False, [5, 5, 1], [0, 1, 0], [0, 0, 0],
     [1, 0, 2]),
    (LESS + "chain_numa_spread", "numa,spread", False, [5, 1, 3], [0, 1, 0], [0, 0, 0],
     [1, 2, 0]),
    (LESS + "chain_numa_bind_moves_numa_first", "binpack,numa", True, [5, 1], [1, 0], [0, 0],
     [0, 1]),
    (LESS + "chain_equal_lower_index_first", "spread,binpack", False, [1, 1], [0, 0], [0, 0],
     [1, 0]),
    (LESS + "unknown_sorts_like_spread", "whatever", False, [5, 1], [0, 0], [0, 0], [1, 0]),
]


@pytest.mark.parametrize("row", LESS_VECTORS, ids=[row[0] for row in LESS_VECTORS])
def test_device_order(row: tuple[str, str, bool, list[float], list[int], list[int], list[int]]) -> None:
    _, policy, numa_bind, scores, numas, useds, expected = row
    assert order(policy, numa_bind, scores, numas, useds) == expected


def test_node_policy_and_default_score() -> None:
    """node_policy_test TestLess / TestComputeDefaultScore."""
    fits = [("a", 3.0), ("b", 8.0), ("c", 5.0)]
    assert pick_node("binpack", fits, itemgetter(1))[-1][0] == "b"
    assert pick_node("spread", fits, itemgetter(1))[-1][0] == "a"
    assert pick_node("anything", fits, itemgetter(1))[-1][0] == "b"
    assert pick_node("binpack", [("x", 1.0), ("y", 1.0)], itemgetter(1))[-1][0] == "x"
    assert node_score(used=5, count=10, usedcores=50, totalcore=100, usedmem=4000, totalmem=8000) == 15.0
    assert node_score(used=5, count=0, usedcores=50, totalcore=100, usedmem=4000, totalmem=8000) == 0.0


@pytest.mark.parametrize(("value", "expected"), [
    (None, Weights(1, 1, 1)), ("slot=2, core=0 ,memory=1", Weights(2, 0, 1)),
    ("memory=3,slot=0,core=0", Weights(0, 0, 3)),
    ("slot=1,core=1", "expected 3 comma-separated weights, got 2"),
    ("slot=1,core=1,gpu=1", 'unknown weight "gpu"'), ("slot=1,slot=1,core=1", 'duplicate weight "slot"'),
    ("slot=0,core=0,memory=0", "at least one weight must be positive"),
    ("slot=x,core=0,memory=1", '"slot" weight "x" is not an integer'),
    ("slot=1,core=-1,memory=1", '"core" weight must not be negative'), ("slot,core=1,memory=1", "key=value"),
])
def test_device_scoring_weights(value: str | None, expected: Weights | str) -> None:
    if isinstance(expected, Weights):
        assert parse_scoring_weights(value) == expected
    else:
        with pytest.raises(ScoringWeightsError, match=expected):
            parse_scoring_weights(value)


def test_reason_format_and_parse() -> None:
    """common_test ParseReason + GenReason: items sorted as strings; bare reasons dropped on parse."""
    text = r.gen_reason({"ResourceQuotaNotFit": 3, "AllocatedCardsInsufficientRequest": 1}, 4)
    assert text == "1/4 AllocatedCardsInsufficientRequest, 3/4 ResourceQuotaNotFit"
    assert r.parse_reason(text) == {"AllocatedCardsInsufficientRequest": 1, "ResourceQuotaNotFit": 3}
    assert r.parse_reason("NodeInsufficientDevice") == {}
    memory = "1/4 CardInsufficientMemory"
    failed = {"a": memory, "b": "NodeInsufficientDevice", "c": memory}
    assert r.unschedulable_message(failed, 3) == (
        "0/3 nodes are available: 1 NodeInsufficientDevice, 2 1/4 CardInsufficientMemory.")


def test_every_reason_code_is_explained_and_produced() -> None:
    constants = (v for k, v in vars(r).items() if k.isupper() and isinstance(v, str))
    codes = {v for v in constants if v.isalpha() and v[0].isupper()}
    assert codes == r.HAMI_CODES and codes <= set(r.CATALOGUE)
    expected = [row[-1] for row in FIT_VECTORS] + [str(c.failed) for c in CASES.values()]
    text = " ".join(str(e) for e in expected)
    never_emitted = {r.NODE_UNFIT_POD, r.NODE_FIT_POD, r.MODE_NOT_FIT, r.CARD_NOT_FOUND_CUSTOM_FILTER_RULE}
    assert {code for code in codes - never_emitted if code not in text} == set()


def test_collapse_init_containers() -> None:
    """initContainer_test: init = max, app = sum with slots per occurrence, effective = max."""
    cd = ContainerDevice
    devices = ((cd("g1", "NVIDIA", 5000, 30),), (cd("g1", "NVIDIA", 3000, 50),),
               (cd("g1", "NVIDIA", 1000, 10), cd("g2", "NVIDIA", 200, 0)), (cd("g1", "NVIDIA", 1500, 10),))
    assert collapse_init_containers(devices, 2) == (
        DeviceShare("g1", 5000, 50, 2), DeviceShare("g2", 200, 0, 1))
    assert collapse_init_containers(devices, 2, app_only=True) == (
        DeviceShare("g1", 2500, 20, 2), DeviceShare("g2", 200, 0, 1))


def test_quota_manager() -> None:
    """quota_test / TestFitQuota: limits.* keys only, explicit 0 blocks, delete lifts, factor scales."""
    q = QuotaManager(NvidiaConfig(memory_factor=2))
    rq = {"metadata": {"namespace": "ns"}, "spec": {"hard": {
        "limits.nvidia.com/gpumem": "1000", "requests.nvidia.com/gpumem": "1",
        "limits.nvidia.com/gpucores": "0", "limits.cpu": "4"}}}
    assert q.fits("ns", 10**9, 10**9) and not q.limited("ns")
    q.add_quota(rq)
    assert q.limited("ns") and not q.fits("ns", 0, 1) and q.fits("ns", 2000, 0) and not q.fits("ns", 2001, 0)
    q.add_usage("ns", (DeviceShare("g", 1500, 0),))
    assert not q.fits("ns", 501, 0) and q.fits("ns", 501, 0, credit=(1, 0))
    q.remove_usage("ns", (DeviceShare("g", 9999, 0),))
    entry = q.entry("ns", "nvidia.com/gpumem")
    assert entry is not None and entry.used == 0
    q.delete_quota(rq)
    assert not q.limited("ns") and q.fits("ns", 10**9, 10**9)


@pytest.mark.parametrize(("text", "expected"), [
    ("1", 1), ("16Gi", 16 * 2**30), ("1k", 1000), ("2e3", 2000), ("1.0", 1), ("500m", None), ("1.5", None),
    ("abc", None), ("", None), (7, 7), (True, None), ("9223372036854775808", None),
])
def test_int_quantity(text: object, expected: int | None) -> None:
    assert int_quantity(text) == expected


def test_device_config_loader() -> None:
    cfg = load_nvidia_config({"nvidia": {"resourceMemoryName": "example.com/mem", "defaultMemory": 512,
                                         "memoryFactor": 0, "deviceSplitCount": 10}})
    assert cfg.resource_memory_name == "example.com/mem" and cfg.default_memory == 512 and cfg.factor == 1
    assert load_nvidia_config(None) == NvidiaConfig() == load_nvidia_config({"other": {}})
    with pytest.raises(DeviceConfigError, match=r"nvidia.defaultCores must be an integer"):
        load_nvidia_config({"nvidia": {"defaultCores": "10"}})
    with pytest.raises(DeviceConfigError, match="must be a mapping"):
        load_nvidia_config({"nvidia": ["x"]})
