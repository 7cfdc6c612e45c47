"""The monitor's truth reconciler, read back for `hami-doctor node(s) --prometheus-url`.

The vGPU monitor exports `hami_inconsistency{node,kind}` (allocations, HAMi-core regions and NVML's
processes crossed on each node); the doctor shows a non-zero kind as a warning on that node, with what
it means and what to do, as the HAMiAllocationInconsistent runbook says.
"""

from __future__ import annotations

from hami.core.promapi import QueryFn
from hami.doctor.findings import WARNING, Finding

# kind -> (what it means, the fix)
MEANING = {
    "allocation_without_region": (
        "container(s) hold a vGPU allocation but have no HAMi-core region",
        "check the image loads HAMi-core (LD_PRELOAD, libvgpu.so); if the pod does not use the GPU, "
        "release the allocation (hami-doctor idle)",
    ),
    "region_without_pod": (
        "HAMi-core region(s) belong to no pod on the node",
        "remove the stale directory under the monitor's containers path once no process uses it",
    ),
    "region_unreadable": (
        "region(s) of allocated pods cannot be read by the monitor",
        "align the HAMi-core version in the image with the one the monitor supports; see the monitor's log",
    ),
    "memory_outside_hami": (
        "GPU(s) hold process memory HAMi-core does not account for",
        "find the process with nvidia-smi --query-compute-apps and move it off the shared card, or give "
        "it a vGPU through HAMi",
    ),
}


def read(query: QueryFn, monitor_job: str) -> dict[str, dict[str, int]]:
    """node -> kind -> findings, for the kinds that are not zero."""
    out: dict[str, dict[str, int]] = {}
    for s in query(f'max by (node, kind) (hami_inconsistency{{job="{monitor_job}"}}) > 0'):
        out.setdefault(s.labels.get("node", ""), {})[s.labels.get("kind", "")] = int(s.value)
    return out


def findings(by_kind: dict[str, int]) -> list[Finding]:
    out = []
    for kind, n in sorted(by_kind.items()):
        what, fix = MEANING.get(kind, (f"inconsistency {kind}", "see the HAMiAllocationInconsistent runbook"))
        out.append(
            Finding(
                WARNING,
                f"node.truth.{kind}",
                f"{n} {what}",
                (f"hami_inconsistency{{kind={kind!r}}} = {n}",),
                fix,
            )
        )
    return out
