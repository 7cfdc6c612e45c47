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
from hami.testing.builders import dev, pod, res
from hami.testing.engineinputs import node_state

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
