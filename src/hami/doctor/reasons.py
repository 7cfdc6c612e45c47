"""Filter reason codes (docs/design/scheduler-filter.md §4.8) with the meaning and fix of the scheduler
guide's table, and the parser for the FilteringFailed messages the scheduler aggregates (§4.2)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# reason → (meaning, fix). The first five are the guide's table in intent; the rest are the
# other codes of pkg/device/common/common.go, with the pod annotation or node state that causes them.
REASONS: dict[str, tuple[str, str]] = {
    "NodeInsufficientDevice": (
        "the node has fewer GPUs than the pod requests",
        "check the node's GPU count; lower the pod's nvidia.com/gpu request",
    ),
    "CardInsufficientMemory": (
        "the requested memory exceeds what one card has free",
        "request less nvidia.com/gpumem, or use a node with larger GPUs",
    ),
    "ExclusiveDeviceAllocateConflict": (
        "the pod wants an exclusive GPU (gpucores 100) but the card is already shared",
        "wait for the pods on it to finish, or schedule to another node",
    ),
    "NodeUnfitPod": (
        "the node's device information is stale or does not match the pod's device type",
        "check the device plugin; check the node annotations (hami-doctor node NAME)",
    ),
    "ResourceQuotaNotFit": (
        "the namespace's ResourceQuota (limits.nvidia.com/gpumem, gpucores) would be exceeded",
        "check and adjust the ResourceQuota",
    ),
    "CardTypeMismatch": (
        "the card's type is excluded by nvidia.com/use-gputype / nouse-gputype",
        "fix the pod's use-gputype/nouse-gputype annotations or pick a node with that type",
    ),
    "CardUuidMismatch": (
        "the card is excluded by nvidia.com/use-gpuuuid / nouse-gpuuuid",
        "fix the pod's use-gpuuuid/nouse-gpuuuid annotations",
    ),
    "CardTimeSlicingExhausted": (
        "every split slot of the card is taken (count reached)",
        "wait for resources to be released, or increase deviceSplitCount",
    ),
    "CardComputeUnitsExhausted": (
        "the card's cores are fully used (an exclusive pod holds it)",
        "wait for the exclusive pod to finish, or schedule to another node",
    ),
    "CardInsufficientCore": (
        "the requested nvidia.com/gpucores exceed the card's free cores",
        "request fewer gpucores, or wait for pods on the card to finish",
    ),
    "CardNotHealth": (
        "the device plugin registered the card as unhealthy",
        "check the GPU: nvidia-smi -q -d HEALTH and -d ECC on the node",
    ),
    "CardCordoned": (
        "the card is listed in the node's hami.io/device-cordon annotation",
        "remove the UUID from hami.io/device-cordon when the card is fit again",
    ),
    "NumaNotFit": (
        "nvidia.com/numa-bind asks for all cards on one NUMA node and none has enough",
        "drop nvidia.com/numa-bind or request fewer cards",
    ),
    "CardNotFoundCustomFilterRule": (
        "no card passed the custom filter rule",
        "check the pod's device selection annotations",
    ),
    "CardMigTopologyInfeasible": (
        "no free MIG placement fits the requested profile",
        "request a smaller profile or wait for MIG instances to be freed",
    ),
    "AllocatedCardsInsufficientRequest": (
        "fewer cards fit than the container requests",
        "lower nvidia.com/gpu or the per-card memory/cores request",
    ),
    "ModeNotFit": (
        "the card's mode (hami-core/mig/mps) does not match nvidia.com/vgpu-mode",
        "fix nvidia.com/vgpu-mode or use a node in that mode",
    ),
    "node unregistered": (
        "the scheduler has no device registration for the node",
        "check the node's hami.io/node-nvidia-register annotation and its device plugin",
    ),
    "node usage unavailable": (
        "the scheduler could not compute the node's usage",
        "raise the scheduler log level to V(4) and check the Filter logs",
    ),
}

_PER_REASON = re.compile(r"^(\d+) nodes (.+?)\((.*)\)$")
_NO_NODE = re.compile(r"^no available node, (\d+) nodes do not meet$")
# The scheduler guide's example event text: "Bindingfailed: CardInsufficientMemory on node gpu-node-01".
_ON_NODE = re.compile(r"\b([A-Za-z]+) on node (\S+)")
_COUNTED = re.compile(r"(\d+)/(\d+) ([A-Za-z]+)")


@dataclass
class FilterFailures:
    """What the FilteringFailed messages of one pod say: reason → nodes, plus the node total."""

    by_reason: dict[str, list[str]] = field(default_factory=dict)
    nodes_not_fit: int | None = None
    other: list[str] = field(default_factory=list)

    def add(self, reason: str, nodes: list[str]) -> None:
        known = self.by_reason.setdefault(reason, [])
        known.extend(n for n in nodes if n not in known)


def parse_filter_messages(messages: list[str]) -> FilterFailures:
    out = FilterFailures()
    for message in messages:
        text = message.strip()
        if m := _PER_REASON.match(text):
            out.add(m.group(2), [n for n in m.group(3).split(",") if n])
        elif m := _NO_NODE.match(text):
            out.nodes_not_fit = int(m.group(1))
        elif found := _ON_NODE.findall(text):
            for reason, node in found:
                out.add(reason, [node])
        elif counted := _COUNTED.findall(text):
            for _, _, reason in counted:
                out.add(reason, [])
        else:
            out.other.append(text)
    return out


def explain(reason: str) -> tuple[str, str]:
    return REASONS.get(
        reason, ("unknown reason code", "raise the scheduler log level to V(4) and read the Filter logs")
    )
