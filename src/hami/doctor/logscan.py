"""Known scheduler and device-plugin log lines → meaning and action.

The lines are those docs/guides/device-plugin-debugging.md (§1.3, §4.3, §4.4, §7) and
docs/guides/scheduler-debugging.md quote from HAMi, and this project's own wording of the same
events; then this project's own warning and error lines (``logcatalog``). ``scan`` counts each
pattern and keeps its first occurrence."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from hami.core import reasons
from hami.doctor.findings import BROKEN, OK, WARNING, Finding, Section, Severity, Table
from hami.doctor.logcatalog import OWN_PATTERNS
from hami.doctor.logpattern import LogPattern

# The guide's severity column (§7) and what it means for the exit status.
LEVELS: dict[str, Severity] = {"Fatal": BROKEN, "Error": BROKEN, "Warning": WARNING, "Info": OK}


_p = LogPattern


DP, SCHED = "device-plugin", "scheduler"
# First match wins, so the specific patterns come before the general ones.
PATTERNS: tuple[LogPattern, ...] = (
    _p(
        "nvml-init-err",
        r"nvml Init err",
        DP,
        "Fatal",
        "NVIDIA driver not available",
        "check the driver install and that /dev/nvidia* is mounted in the device plugin (nvidia-smi)",
    ),
    _p(
        "nvml-device-count-err",
        r"nvml GetDeviceCount err",
        DP,
        "Fatal",
        "cannot enumerate GPUs",
        "check NVIDIA_VISIBLE_DEVICES and the nvidia-container-runtime configuration",
    ),
    _p(
        "nvml-memory-err",
        r"nvml get memory error",
        DP,
        "Fatal",
        "cannot read device memory",
        "check the GPU hardware state (nvidia-smi -q)",
    ),
    _p(
        "memory-info-unsupported",
        r"GetMemoryInfo not supported",
        DP,
        "Warning",
        "unified-memory GPU",
        "configure preConfiguredDeviceMemory",
    ),
    _p(
        "get-node-error",
        r"get node error",
        DP,
        "Error",
        "the device plugin cannot read its node",
        "check the ServiceAccount's RBAC and the NODE_NAME environment variable",
    ),
    _p(
        "patch-node-error",
        r"patch node error",
        DP,
        "Error",
        "node annotation write failed",
        "check RBAC (patch nodes) and the network to the API server",
    ),
    _p(
        "device-number-not-matched",
        r"device number not matched",
        DP,
        "Error",
        "the scheduler's device count differs from kubelet's request",
        "check the pod's hami.io/vgpu-devices-* annotations and the scheduler log",
    ),
    _p(
        "unknown-device",
        r"invalid allocation request for .*unknown device",
        DP,
        "Error",
        "kubelet asked for a device ID that does not exist",
        "check the health of the node's GPUs",
    ),
    _p(
        "request-too-large",
        r"request .*too large",
        DP,
        "Error",
        "MIG mode: more than one shared device requested",
        "adjust the pod's resource request",
    ),
    _p(
        "failed-to-get-pending-pod",
        r"failed to get pending pod",
        DP,
        "Error",
        "the device plugin cannot find the pod being allocated",
        "check API server connectivity and RBAC",
    ),
    _p(
        "failed-to-decode-pod-devices",
        r"failed to decode pod devices",
        DP,
        "Error",
        "the pod's device annotation is malformed",
        "check that scheduler and device plugin versions match",
    ),
    _p(
        "retrying",
        r"Retrying in \d+s seconds",
        DP,
        "Warning",
        "registration failed and is retried",
        "watch whether it recovers (a later 'Successfully registered annotation')",
    ),
    _p(
        "grpc-crashed",
        # the guide's wording, and the real line, which names the resource
        r"GRPC server (?:for '\S+' )?has repeatedly crashed",
        DP,
        "Fatal",
        "the device plugin gRPC server keeps crashing",
        "check the socket's permissions and system resources",
    ),
    _p(
        "mig-apply-lock",
        r"MIG apply lock file detected",
        DP,
        "Info",
        "a MIG reconfiguration is in progress",
        "wait for it to finish",
    ),
    _p(
        "registered-annotation",
        r"Successfully registered annotation",
        DP,
        "Info",
        "devices registered on the node",
        "none",
    ),
    _p(
        "grpc-serving",
        r"Starting to serve '\S+' on ",
        DP,
        "Info",
        "the device plugin's gRPC server is up",
        "none",
    ),
    _p(
        "watch-and-register",
        r"Starting WatchAndRegister",
        DP,
        "Info",
        "the registration loop started (node annotations every 30 s)",
        "none",
    ),
    _p(
        "registered-kubelet",
        r"Registered device plugin for .* with Kubelet",
        DP,
        "Info",
        "the device plugin registered with kubelet",
        "none",
    ),
    _p(
        "handshake-time-expired",
        r"handshake time expired",
        SCHED,
        "Error",
        "device plugin and scheduler clocks disagree",
        "check NTP on node and control plane; keep skew under 30 s",
    ),
    _p(
        "handshake-timeout",
        # HAMi's line, then this project's register pass dropping the node
        r"handshake timeout|handshake .* expired and no \S+ allocatable",
        SCHED,
        "Error",
        "the node's handshake expired",
        "follow docs/guides/device-plugin-debugging.md §4.3: device plugin pod state, then its "
        "WatchAndRegister log (hami-doctor node NAME)",
    ),
    _p(
        "annos-not-found",
        r"annos not found hami\.io/node-nvidia-register",
        SCHED,
        "Error",
        "the node has no device registration",
        "check the device plugin on that node",
    ),
    _p(
        "node-not-found",
        r"node not found",
        SCHED,
        "Error",
        "the scheduler does not see the node's devices",
        "make scheduler and device plugin versions match; the key must be hami.io/node-nvidia-register",
    ),
    _p(
        "device-decode-error",
        r"device decode error|no gpu found on node",
        SCHED,
        "Error",
        "the node's device registration cannot be decoded",
        "upgrade the HAMi components together",
    ),
    _p(
        "node-lock-expired",
        # the tuning guide quotes HAMi's line; this project's scheduler writes the same words
        r"node lock expired, releasing",
        SCHED,
        "Warning",
        "a node lock outlived the scheduler's node-lock timeout and was broken: a bind crashed, or binds "
        "take longer than the timeout",
        "if binds are slow, raise --node-lock-timeout (scheduler.nodeLockExpire, 8m-10m); hami-tune "
        "recommends a value from the bind latency",
    ),
    _p(
        "node-lock-owner-gone",
        r"lock owner \S+ is gone, taking the lock over",
        SCHED,
        "Info",
        "the pod holding a node lock was deleted; the scheduler took the lock over",
        "none",
    ),
    _p(
        "client-rate-limited",
        # client-go's wording, which the tuning guide quotes
        r"rate limiter Wait returned error|client rate limiter",
        SCHED,
        "Warning",
        "the scheduler's API client waits on its own QPS limit",
        "raise --kube-qps/--kube-burst (hami-tune recommends them from the request rate)",
    ),
    _p(
        "node-lock-contention",
        r"node lock contention",
        SCHED,
        "Warning",
        "another pod holds the node lock",
        "hami-doctor node NAME shows the holder and its age; an expired lock is taken over",
    ),
    # The extender's -v=4 lines, read with the scheduler's own formats.
    _p("filtered-out", reasons.FILTERED_OUT.line_pattern, SCHED, "Warning", "", ""),
    _p(
        "filtering-failed",
        r"FilteringFailed",
        SCHED,
        "Warning",
        "no node fits the pod",
        "read the reason codes (hami-doctor pod NS/NAME)",
    ),
    _p("filtering-node", reasons.FILTERING_NODE.line_pattern, SCHED, "Info", "V(4) Filter trace", "none"),
    *OWN_PATTERNS,
)


@dataclass
class Hit:
    pattern: LogPattern
    key: str
    meaning: str
    action: str
    count: int = 0
    first_line: int = 0
    first_text: str = ""


@dataclass
class ScanResult:
    lines: int = 0
    hits: dict[str, Hit] = field(default_factory=dict)  # in order of first occurrence


def classify(line: str) -> tuple[LogPattern, str, str, str] | None:
    """(pattern, key, meaning, action) of the first pattern that matches, else None."""
    for p in PATTERNS:
        m = p.regex.search(line)
        if m is None:
            continue
        if p.key == "filtered-out":  # keyed by the first code the verdict names
            code = reasons.verdict_codes(m.group("codes"))[0]
            meaning, action = reasons.explain(code)
            return p, f"{p.key}:{code.replace(' ', '-')}", f"Filter: {meaning}", action
        return p, p.key, p.meaning, p.action
    return None


def scan(lines: Iterable[str]) -> ScanResult:
    result = ScanResult()
    for number, line in enumerate(lines, 1):
        result.lines = number
        found = classify(line)
        if found is None:
            continue
        pattern, key, meaning, action = found
        hit = result.hits.get(key)
        if hit is None:
            hit = result.hits[key] = Hit(
                pattern, key, meaning, action, first_line=number, first_text=line.rstrip("\n")
            )
        hit.count += 1
    return result


def report(result: ScanResult, title: str) -> Section:
    section = Section(title)
    matched = sum(h.count for h in result.hits.values())
    section.findings.append(
        Finding(OK, "log.read", f"{result.lines} lines read, {matched} matched known patterns")
    )
    for hit in result.hits.values():
        section.findings.append(
            Finding(
                LEVELS[hit.pattern.level],
                f"log.{hit.key}",
                f"{hit.pattern.level} {hit.key} x{hit.count} ({hit.pattern.component}): {hit.meaning}",
                (f"first at line {hit.first_line}: {hit.first_text}",),
                hit.action,
            )
        )
    rows = tuple((h.key, h.pattern.level, str(h.count), str(h.first_line)) for h in result.hits.values())
    if rows:
        section.tables.append(Table("log lines", ("Pattern", "Level", "Count", "First line"), rows))
    return section
