"""HAMi's filter reason codes in one catalogue: each code with what it means and what to do, and every
message that carries codes (FailedNodes strings, events, log lines) as one format with its parser.

The scheduler writes with it and ``hami-doctor`` reads with it. Each message format is written once,
as a template; the pattern that reads it back is derived from that template, so writer and reader
cannot drift. Per node, Fit counts why each card was rejected and ``gen_reason`` renders the counts the
way HAMi does (``1/4 AllocatedCardsInsufficientRequest, 3/4 ResourceQuotaNotFit``); these strings are
the extender's FailedNodes values, which kube-scheduler then folds into ``0/N nodes are available: …``.

Every section sign (§) here names its document.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

# HAMi's codes (pkg/device/common/common.go, docs/design/scheduler-filter.md §4.8).
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

# HAMi's other failure texts: a node's whole FailedNodes string.
NODE_UNREGISTERED: Final = "node unregistered"
NODE_USAGE_UNAVAILABLE: Final = "node usage unavailable"
DEVICE_TYPE_NOT_FOUND: Final = "Device type not found"

# Where a code appears: as ``<n>/<m> <Code>`` items of a FailedNodes string, as the whole string, or in
# log lines only.
COUNTED, WHOLE, LOG_ONLY = "counted", "whole", "log only"


@dataclass(frozen=True)
class Reason:
    code: str
    form: str  # COUNTED, WHOLE or LOG_ONLY
    meaning: str  # for a person: docs/guides/scheduler-debugging.md §4's table, extended to every code
    action: str  # what to do

    @property
    def hami(self) -> bool:
        """One of HAMi's reason codes (not a failure text)."""
        return " " not in self.code


_R = Reason
# The first five are the scheduler guide's table in intent; the rest are the other codes of
# pkg/device/common/common.go, with the pod annotation or node state that causes them.
CATALOGUE: Final[Mapping[str, Reason]] = {
    reason.code: reason
    for reason in (
        _R(NODE_INSUFFICIENT_DEVICE, WHOLE, "the node has fewer GPUs than the pod requests",
           "check the node's GPU count; lower the pod's nvidia.com/gpu request"),
        _R(CARD_INSUFFICIENT_MEMORY, COUNTED, "the requested memory exceeds what one card has free",
           "request less nvidia.com/gpumem, or use a node with larger GPUs"),
        _R(EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, COUNTED,
           "the pod wants an exclusive GPU (gpucores 100) but the card is already shared",
           "wait for the pods on it to finish, or schedule to another node"),
        _R(NODE_UNFIT_POD, LOG_ONLY,
           "the node's device information is stale or does not match the pod's device type",
           "check the device plugin; check the node annotations (hami-doctor node NAME)"),
        _R(RESOURCE_QUOTA_NOT_FIT, COUNTED,
           "the namespace's ResourceQuota (limits.nvidia.com/gpumem, gpucores) would be exceeded",
           "check and adjust the ResourceQuota"),
        _R(CARD_TYPE_MISMATCH, COUNTED,
           "the card's type is excluded by nvidia.com/use-gputype / nouse-gputype",
           "fix the pod's use-gputype/nouse-gputype annotations or pick a node with that type"),
        _R(CARD_UUID_MISMATCH, COUNTED, "the card is excluded by nvidia.com/use-gpuuuid / nouse-gpuuuid",
           "fix the pod's use-gpuuuid/nouse-gpuuuid annotations"),
        _R(CARD_TIME_SLICING_EXHAUSTED, COUNTED, "every split slot of the card is taken (count reached)",
           "wait for resources to be released, or increase deviceSplitCount"),
        _R(CARD_COMPUTE_UNITS_EXHAUSTED, COUNTED,
           "the card's cores are fully used (an exclusive pod holds it)",
           "wait for the exclusive pod to finish, or schedule to another node"),
        _R(CARD_INSUFFICIENT_CORE, COUNTED, "the requested nvidia.com/gpucores exceed the card's free cores",
           "request fewer gpucores, or wait for pods on the card to finish"),
        _R(CARD_NOT_HEALTH, COUNTED, "the device plugin registered the card as unhealthy",
           "check the GPU: nvidia-smi -q -d HEALTH and -d ECC on the node"),
        _R(CARD_CORDONED, COUNTED, "the card is listed in the node's hami.io/device-cordon annotation",
           "remove the UUID from hami.io/device-cordon when the card is fit again"),
        _R(NUMA_NOT_FIT, COUNTED,
           "nvidia.com/numa-bind asks for all cards on one NUMA node and none has enough",
           "drop nvidia.com/numa-bind or request fewer cards"),
        _R(CARD_NOT_FOUND_CUSTOM_FILTER_RULE, COUNTED, "no card passed the custom filter rule",
           "check the pod's device selection annotations"),
        _R(CARD_MIG_TOPOLOGY_INFEASIBLE, COUNTED, "no free MIG placement fits the requested profile",
           "request a smaller profile or wait for MIG instances to be freed"),
        _R(ALLOCATED_CARDS_INSUFFICIENT_REQUEST, COUNTED, "fewer cards fit than the container requests",
           "lower nvidia.com/gpu or the per-card memory/cores request"),
        _R(MODE_NOT_FIT, COUNTED, "the card's mode (hami-core/mig/mps) does not match nvidia.com/vgpu-mode",
           "fix nvidia.com/vgpu-mode or use a node in that mode"),
        _R(NODE_FIT_POD, LOG_ONLY, "the node can host the pod", "none"),
        _R(NODE_UNREGISTERED, WHOLE, "the scheduler has no device registration for the node",
           "check the node's hami.io/node-nvidia-register annotation and its device plugin"),
        _R(NODE_USAGE_UNAVAILABLE, WHOLE, "the scheduler could not compute the node's usage",
           "raise the scheduler log level to V(4) and check the Filter logs"),
        _R(DEVICE_TYPE_NOT_FOUND, WHOLE, "the scheduler has no device backend for the requested type",
           "request a device type the scheduler serves (nvidia.com/gpu)"),
    )
}
HAMI_CODES: Final = frozenset(code for code, reason in CATALOGUE.items() if reason.hami)
UNKNOWN: Final = Reason(
    "", WHOLE, "unknown reason code", "raise the scheduler log level to V(4) and read the Filter logs"
)


def explain(code: str) -> tuple[str, str]:
    """(meaning, action) of ``code``; an unknown code says where to look."""
    reason = CATALOGUE.get(code, UNKNOWN)
    return reason.meaning, reason.action


class Format:
    """One message: the template the scheduler writes it with, and the pattern that reads it back.

    ``fields`` gives the pattern of each ``{field}`` of the template; everything else matches itself.
    ``printf`` is the same template for ``%`` with the fields in order, for the hot path.
    """

    def __init__(self, template: str, **fields: str) -> None:
        self.template = template
        parts, printf = [], []
        for literal, name, _spec, _conversion in string.Formatter().parse(template):
            parts.append(re.escape(literal))
            printf.append(literal.replace("%", "%%"))
            if name is not None:
                parts.append(f"(?P<{name}>{fields[name]})")
                printf.append("%s")
        self.pattern = "".join(parts)
        self.printf = "".join(printf)
        # A klog line ends with its message: the message is read up to the end of the line.
        self.line_pattern = self.pattern + "$"
        self._whole = re.compile(self.pattern)
        self._line = re.compile(self.line_pattern)

    def render(self, **values: object) -> str:
        return self.template.format(**values)

    def read(self, message: str) -> dict[str, str] | None:
        """The fields of ``message`` (an event's message, the whole of it), or None."""
        m = self._whole.fullmatch(message.strip())
        return None if m is None else m.groupdict(default="")

    def find(self, line: str) -> dict[str, str] | None:
        """The fields of the message that ends ``line`` (a klog line), or None."""
        m = self._line.search(line)
        return None if m is None else m.groupdict(default="")


_NODE, _COUNT, _CODE = r"[^\s,()]+", r"\d+", r"\S+"
# Between the items of a FailedNodes string, the codes of a verdict line and the nodes of the node list
# line; HAMi's per-reason event joins its nodes with a bare comma.
_SEP, _EVENT_SEP = ", ", ","
# One item of a FailedNodes string (HAMi's GenReason/ParseReason: "%d/%d %s").
ITEM: Final = Format("{count}/{total} {code}", count=_COUNT, total=_COUNT, code=_CODE)
_ITEM_PREFIX, _ITEM_PRINTF = re.compile(ITEM.pattern), ITEM.printf  # Fit writes one per rejected node
# The events HAMi records (docs/design/scheduler-filter.md §4.1 steps 6 and 10, §4.2).
PER_REASON: Final = Format(
    "{nodes_count} nodes {code}({nodes})", nodes_count=_COUNT, code=r"\S+?", nodes=r".*"
)
NO_FIT: Final = Format("no available node, {nodes_count} nodes do not meet", nodes_count=_COUNT)
FIT: Final = Format(
    "find fit node({node}), {unfit} nodes not fit, {fit} nodes fit({scores})",
    node=_NODE, unfit=_COUNT, fit=_COUNT, scores=r"[^()]*",
)
# The extender's line for operators (docs/guides/scheduler-debugging.md §3.1), at most MAX_NODES_LISTED
# nodes named; not HAMi's (docs/design/differences.md).
MORE_NODES: Final = Format(" and {hidden} more", hidden=_COUNT)
NODE_LIST: Final = Format("Bindingfailed: {code} on node {nodes}{more}", code=_CODE,
                          nodes=f"{_NODE}(?:{_SEP}{_NODE})*", more=f"(?:{MORE_NODES.pattern})?")
MAX_NODES_LISTED: Final = 5
# The extender's -v=4 lines (docs/design/scheduler-extender.md §5.4), not HAMi's (docs/design/differences.md):
# one per node, then the verdict of a rejected one. The verdict names the codes without the "<n>/<m>"
# card counts; memory adds what was compared.
FILTERING_NODE: Final = Format("Filtering node {node} for pod {pod}", node=_NODE, pod=r"\S+")
MEMORY_DETAIL: Final = Format(", requested {requested}Mi but available {free}Mi", requested=_COUNT,
                              free=_COUNT)
FILTERED_OUT: Final = Format("Node {node} filtered out: {codes}{detail}", node=_NODE, codes=r".+?",
                             detail=f"(?:{MEMORY_DETAIL.pattern})?")
# HAMi's V(4) InfoS line where a registered node's devices do not fit the pod.
NODE_UNFIT: Final = Format('"{code}" pod="{pod}" node="{node}" reason="{reason}"', code=_CODE,
                           pod=r"[^\"]*", node=r"[^\"]*", reason=r".*")


def gen_reason(counts: Mapping[str, int], total: int) -> str:
    """HAMi ``GenReason``: ``<n>/<total> <Reason>`` items, sorted as strings, joined by ``", "``."""
    return _SEP.join(sorted([_ITEM_PRINTF % (n, total, code) for code, n in counts.items()]))


def parse_reason(text: str) -> dict[str, int]:
    """HAMi ``ParseReason``: reason type -> count; items that are not ``<n>/<m> <Reason>`` are dropped."""
    out: dict[str, int] = {}
    for item in text.split(_SEP):
        m = _ITEM_PREFIX.match(item)
        if m is not None:
            out[m["code"]] = int(m["count"])
    return out


def verdict_codes(codes: str) -> list[str]:
    """The codes of a -v=4 verdict line's ``codes`` field (``filtered_out_line``)."""
    return codes.split(_SEP)


def failure_events(failed_nodes: Mapping[str, str]) -> list[str]:
    """Messages of the per-reason FilteringFailed events HAMi records when no node fits
    (docs/design/scheduler-filter.md §4.2).

    One per reason type, ``<k> nodes <Reason>(<sorted, comma-joined nodes>)``, in reason order.
    Nodes whose reason has no ``n/m`` items (``NodeInsufficientDevice``, ``node unregistered``)
    produce no event, as in HAMi.
    """
    by_reason: dict[str, list[str]] = {}
    for node, reason in failed_nodes.items():
        for kind in parse_reason(reason):
            by_reason.setdefault(kind, []).append(node)
    return [
        PER_REASON.render(nodes_count=len(nodes), code=kind, nodes=_EVENT_SEP.join(sorted(nodes)))
        for kind, nodes in sorted(by_reason.items())
    ]


def node_list_messages(failed: Mapping[str, str]) -> list[str]:
    """``Bindingfailed: <Reason> on node <node>[, <node>…]`` per reason type
    (docs/guides/scheduler-debugging.md §3.1); a failure text with spaces has none."""
    by_reason: dict[str, list[str]] = {}
    for node, reason in failed.items():
        for kind in parse_reason(reason) or ([reason] if " " not in reason else []):
            by_reason.setdefault(kind, []).append(node)
    out = []
    for kind, nodes in sorted(by_reason.items()):
        nodes.sort()
        hidden = len(nodes) - MAX_NODES_LISTED
        more = MORE_NODES.render(hidden=hidden) if hidden > 0 else ""
        out.append(NODE_LIST.render(code=kind, nodes=_SEP.join(nodes[:MAX_NODES_LISTED]), more=more))
    return out


def no_fit_message(requested_nodes: int) -> str:
    """The FilteringFailed event of docs/design/scheduler-filter.md §4.1 step 6."""
    return NO_FIT.render(nodes_count=requested_nodes)


def fit_message(node: str, requested_nodes: int, labels: Sequence[str]) -> str:
    """The FilteringSucceed event of docs/design/scheduler-filter.md §4.1 step 10; ``labels``
    ("<node>:<score %.2f>") in HAMi's sorted order."""
    unfit = requested_nodes - len(labels)
    return FIT.render(node=node, unfit=unfit, fit=len(labels), scores=_EVENT_SEP.join(labels))


def filtered_out_line(node: str, reason: str, detail: str = "") -> str:
    """The -v=4 verdict of a rejected node: its codes without the card counts, then ``detail``."""
    codes = _SEP.join(parse_reason(reason)) or reason
    return FILTERED_OUT.render(node=node, codes=codes, detail=detail)


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
    return f"0/{all_nodes} nodes are available: {_SEP.join(items)}."


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
    """Reads back the FilteringFailed messages: HAMi's per-reason and no-fit events, the extender's
    node list, and any other message that carries ``<n>/<m> <Reason>`` items (no nodes named)."""
    out = FilterFailures()
    for message in messages:
        text = message.strip()
        if (f := PER_REASON.read(text)) is not None:
            out.add(f["code"], [n for n in f["nodes"].split(_EVENT_SEP) if n])
        elif (f := NO_FIT.read(text)) is not None:
            out.nodes_not_fit = int(f["nodes_count"])
        elif (f := NODE_LIST.read(text)) is not None:
            out.add(f["code"], f["nodes"].split(_SEP))
        elif counted := [m["code"] for item in text.split(_SEP) if (m := _ITEM_PREFIX.search(item))]:
            for code in counted:
                out.add(code, [])
        else:
            out.other.append(text)
    return out
