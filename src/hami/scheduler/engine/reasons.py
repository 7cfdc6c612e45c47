"""HAMi's filter reason codes (``pkg/device/common``), their aggregation and the operator messages.

Per node, Fit counts why each card was rejected and ``gen_reason`` renders the counts the way HAMi
does (``1/4 AllocatedCardsInsufficientRequest, 3/4 ResourceQuotaNotFit``); these strings are the
extender's FailedNodes values, which kube-scheduler then folds into ``0/N nodes are available: …``.

Section signs (§) refer to docs/design/scheduler-filter.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final

CARD_TYPE_MISMATCH: Final = "CardTypeMismatch"
CARD_UUID_MISMATCH: Final = "CardUuidMismatch"
CARD_TIME_SLICING_EXHAUSTED: Final = "CardTimeSlicingExhausted"
CARD_COMPUTE_UNITS_EXHAUSTED: Final = "CardComputeUnitsExhausted"
CARD_INSUFFICIENT_MEMORY: Final = "CardInsufficientMemory"
CARD_INSUFFICIENT_CORE: Final = "CardInsufficientCore"
CARD_NOT_HEALTH: Final = "CardNotHealth"
CARD_CORDONED: Final = "CardCordoned"
NUMA_NOT_FIT: Final = "NumaNotFit"
EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: Final = "ExclusiveDeviceAllocateConflict"
CARD_NOT_FOUND_CUSTOM_FILTER_RULE: Final = "CardNotFoundCustomFilterRule"
CARD_MIG_TOPOLOGY_INFEASIBLE: Final = "CardMigTopologyInfeasible"
NODE_INSUFFICIENT_DEVICE: Final = "NodeInsufficientDevice"
ALLOCATED_CARDS_INSUFFICIENT_REQUEST: Final = "AllocatedCardsInsufficientRequest"
NODE_UNFIT_POD: Final = "NodeUnfitPod"  # log lines only
NODE_FIT_POD: Final = "NodeFitPod"  # log lines only
RESOURCE_QUOTA_NOT_FIT: Final = "ResourceQuotaNotFit"
MODE_NOT_FIT: Final = "ModeNotFit"  # defined by HAMi, never produced for NVIDIA

NODE_UNREGISTERED: Final = "node unregistered"
NODE_USAGE_UNAVAILABLE: Final = "node usage unavailable"
DEVICE_TYPE_NOT_FOUND: Final = "Device type not found"

# What an operator reads from each code (docs/guides/scheduler-debugging.md §4, extended to every code).
MEANINGS: Final[Mapping[str, str]] = {
    NODE_INSUFFICIENT_DEVICE: "the node has fewer GPUs than the container requests; check the node's GPU "
    "count or lower nvidia.com/gpu",
    CARD_INSUFFICIENT_MEMORY: "the requested memory exceeds what one card has free; request less gpumem "
    "or use nodes with larger GPUs",
    EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: "an exclusive card (gpucores=100 or mutex policy) is already shared "
    "by other pods; wait for them to finish or schedule elsewhere",
    NODE_UNFIT_POD: "the node's device information is stale or does not match the pod's device type "
    "constraints; check the device plugin and the node's register annotation",
    RESOURCE_QUOTA_NOT_FIT: "the namespace ResourceQuota on HAMi resources would be exceeded; adjust the "
    "quota (limits.nvidia.com/gpumem, limits.nvidia.com/gpucores)",
    CARD_INSUFFICIENT_CORE: "the requested gpucores exceed the card's free compute share",
    CARD_TYPE_MISMATCH: "the card's model or mode does not match use-gputype/nouse-gputype/vgpu-mode",
    CARD_UUID_MISMATCH: "the card is excluded by use-gpuuuid/nouse-gpuuuid",
    CARD_TIME_SLICING_EXHAUSTED: "the card already runs deviceSplitCount tasks",
    CARD_COMPUTE_UNITS_EXHAUSTED: "the card's compute is fully allocated, so no task can join it",
    CARD_NOT_HEALTH: "the device plugin reports the card unhealthy",
    CARD_CORDONED: "the card is listed in the node's hami.io/device-cordon annotation",
    NUMA_NOT_FIT: "numa-bind: not enough suitable cards on one NUMA node",
    CARD_NOT_FOUND_CUSTOM_FILTER_RULE: "a vendor-specific filter rejected the card",
    CARD_MIG_TOPOLOGY_INFEASIBLE: "no allowed MIG profile with a free placement fits the request",
    ALLOCATED_CARDS_INSUFFICIENT_REQUEST: "some cards fit, but fewer than the container requests",
    MODE_NOT_FIT: "the card's operating mode does not fit the request",
    NODE_FIT_POD: "the node can host the pod (log lines only)",
}

_ITEM = re.compile(r"^(\d+)/(\d+) (\S+)")


def gen_reason(counts: Mapping[str, int], total: int) -> str:
    """HAMi ``GenReason``: ``<n>/<total> <Reason>`` items, sorted as strings, joined by ``", "``."""
    return ", ".join(sorted(f"{n}/{total} {reason}" for reason, n in counts.items()))


def parse_reason(text: str) -> dict[str, int]:
    """HAMi ``ParseReason``: reason type -> count; items that are not ``<n>/<m> <Reason>`` are dropped."""
    out: dict[str, int] = {}
    for item in text.split(", "):
        m = _ITEM.match(item)
        if m is not None:
            out[m.group(3)] = int(m.group(1))
    return out


def failure_events(failed_nodes: Mapping[str, str]) -> list[str]:
    """Messages of the per-reason FilteringFailed events HAMi records when no node fits (§4.2).

    One per reason type, ``<k> nodes <Reason>(<sorted, comma-joined nodes>)``, in reason order.
    Nodes whose reason has no ``n/m`` items (``NodeInsufficientDevice``, ``node unregistered``)
    produce no event, as in HAMi.
    """
    by_reason: dict[str, list[str]] = {}
    for node, reason in failed_nodes.items():
        for kind in parse_reason(reason):
            by_reason.setdefault(kind, []).append(node)
    return [
        f"{len(nodes)} nodes {kind}({','.join(sorted(nodes))})" for kind, nodes in sorted(by_reason.items())
    ]


def no_fit_message(requested_nodes: int) -> str:
    """The FilteringFailed event of §4.1 step 6."""
    return f"no available node, {requested_nodes} nodes do not meet"


def fit_message(node: str, requested_nodes: int, labels: Sequence[str]) -> str:
    """The FilteringSucceed event of §4.1 step 10; ``labels`` ("<node>:<score %.2f>") in HAMi's
    sorted order."""
    unfit = requested_nodes - len(labels)
    return f"find fit node({node}), {unfit} nodes not fit, {len(labels)} nodes fit({','.join(labels)})"


def unschedulable_message(failed_nodes: Mapping[str, str], all_nodes: int) -> str:
    """What ``kubectl describe pod`` shows once kube-scheduler folds the extender's FailedNodes in.

    kube-scheduler counts identical reason strings: ``0/3 nodes are available: 1 <reason>, 2 <reason>.``
    (items sorted as strings). HAMi's reasons already carry ``n/m`` card counts, so a typical line is
    ``0/2 nodes are available: 1 1/4 CardInsufficientMemory, 1 NodeInsufficientDevice.``
    """
    histogram: dict[str, int] = {}
    for reason in failed_nodes.values():
        histogram[reason] = histogram.get(reason, 0) + 1
    items = sorted(f"{n} {reason}" for reason, n in histogram.items())
    return f"0/{all_nodes} nodes are available: {', '.join(items)}."
