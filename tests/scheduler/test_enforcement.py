"""Memory enforcement by the driver in the register annotation and the fit (ours, not HAMi's)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hami.core.codec.node_devices import decode_node_devices, encode_node_devices
from hami.core.devices import ENFORCE_DRIVER
from hami.scheduler.engine.decision import FilterConfig, filter_pod
from hami.scheduler.engine.device_config import NvidiaConfig
from hami.scheduler.engine.requests import PodRequest, pod_request
from hami.scheduler.engine.usage import UsageIndex
from hami.testing.builders import T4, dev, gpu_node, gpu_pod, pod, res
from hami.testing.engineinputs import node_state
from hami.testing.extender import create_pod, metrics_text, running
from hami.testing.extender import filter_pod as http_filter
from hami.testing.kubeapi import KubeAPIServer

# HAMi v2.10's DeviceInfo JSON keys (pkg/device/devices.go): what its json.Unmarshal can fill.
HAMI_KEYS = {
    "id",
    "index",
    "count",
    "devmem",
    "devcore",
    "type",
    "numa",
    "mode",
    "migProfiles",
    "migtemplate",
    "health",
    "devicevendor",
    "custominfo",
}


def decode(the_pod: dict[str, Any]) -> PodRequest:
    request = pod_request(the_pod, NvidiaConfig())
    assert request is not None
    return request


def test_register_annotation_carries_enforcement_where_hami_ignores_it() -> None:
    core, driver = dev("g0"), replace(dev("g1", index=1), enforcement=ENFORCE_DRIVER)
    text = encode_node_devices([core, driver])
    entries = json.loads(text)
    assert "memoryEnforcement" not in entries[0]  # the default is not written: HAMi's bytes unchanged
    assert entries[1]["memoryEnforcement"] == "driver"
    # the key is none of HAMi's and folds to none of them (Go matches keys case-insensitively)
    assert "memoryenforcement" not in {k.lower() for k in HAMI_KEYS}
    assert encode_node_devices([core]) == encode_node_devices([replace(core, enforcement="")])
    back = decode_node_devices(text)
    assert [d.enforcement for d in back] == ["", "driver"]
    assert [replace(d, enforcement="") for d in back] == [
        replace(d, enforcement="", device_vendor="") for d in (core, driver)
    ]


def test_fit_by_enforcement() -> None:
    nodes = [
        node_state("core-node", dev("g0")),
        node_state("driver-node", replace(dev("g1"), enforcement=ENFORCE_DRIVER)),
    ]
    for wanted, node in (("driver", "driver-node"), ("hami-core", "core-node")):
        the_pod = pod(res(1, 1000), annotations={"hami.io/memory-enforcement": wanted})
        result = filter_pod(decode(the_pod), nodes, UsageIndex(), None, FilterConfig())
        assert result.node == node
    only_core = [nodes[0]]
    refused = filter_pod(
        decode(pod(res(1, 1000), annotations={"hami.io/memory-enforcement": "driver"})),
        only_core,
        UsageIndex(),
        None,
        FilterConfig(),
    )
    assert refused.node is None and refused.failed == {"core-node": "1/1 CardTypeMismatch"}
    either = filter_pod(decode(pod(res(1, 1000))), nodes[1:], UsageIndex(), None, FilterConfig())
    assert either.node == "driver-node"  # no annotation: any enforcement fits


def test_filter_over_http_fits_by_enforcement_and_names_the_refusal(kube_api: KubeAPIServer) -> None:
    """kube-scheduler's POST /filter: the annotated pod is placed on the node whose cards run its
    enforcement; offered only the other node, it is refused as CardTypeMismatch (FailedNodes, counter)."""
    kube_api.store.put(gpu_node("core-node", gpus=1))
    driver = replace(dev("GPU-driver-node-0", 8000, type=T4), enforcement=ENFORCE_DRIVER)
    kube_api.store.put(gpu_node("driver-node", devices=[driver]))
    nodes = ["core-node", "driver-node"]
    with running(kube_api) as ext:
        for wanted, fits, other in (
            ("driver", "driver-node", "core-node"),
            ("hami-core", "core-node", "driver-node"),
        ):
            the_pod = gpu_pod(f"wants-{wanted}")
            the_pod["metadata"]["annotations"] = {"hami.io/memory-enforcement": wanted}
            stored = create_pod(kube_api, ext, the_pod)
            assert http_filter(ext, stored, nodes)["NodeNames"] == [fits]
            refused = http_filter(ext, stored, [other])
            assert refused["NodeNames"] is None
            assert refused["FailedNodes"] == {other: "1/1 CardTypeMismatch"}
        for only in nodes:  # no annotation: either enforcement fits
            stored = create_pod(kube_api, ext, gpu_pod(f"any-{only}"))
            assert http_filter(ext, stored, [only])["NodeNames"] == [only]
        # each annotated pod: the other node when placed, then when refused (a placing filter counts too)
        assert 'hami_scheduler_filter_failures_total{reason="CardTypeMismatch"} 4.0' in metrics_text(ext)
