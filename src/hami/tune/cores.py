"""SM-use rules: ``devices.nvidia.gpuCorePolicy`` and per-pod ``nvidia.com/gpucores``
(docs/guides/tuning.md §5, §6.1, §6.2), from each container's SM-use quantile over the window beside its
gpucores limit.

Section signs (§) refer to docs/guides/tuning.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hami.tune import tables
from hami.tune.recommend import Evidence, Recommendation

POLICY = "devices.nvidia.gpuCorePolicy"
GPUCORES = "nvidia.com/gpucores (per pod)"


@dataclass(frozen=True)
class ContainerCores:
    """One container: ``namespace/pod/container``, its p95 SM use and its limit, in percent."""

    name: str
    used_p95: float
    limit: float

    @property
    def overshoots(self) -> bool:
        # A 100% limit is no limit: nothing to isolate.
        return self.limit < 100 and self.used_p95 > self.limit * tables.CORE_OVERSHOOT_RATIO

    @property
    def underused(self) -> bool:
        return self.used_p95 < self.limit * tables.CORE_UNDERUSE_RATIO


def _share(c: ContainerCores) -> str:
    return f"{c.name} {tables.CORE_QUANTILE_NAME} {c.used_p95:.0f}% of limit {c.limit:.0f}%"


def recommend_policy(
    containers: list[ContainerCores], environment: str, current: str, evidence: tuple[Evidence, ...] = ()
) -> Recommendation:
    over = [c for c in containers if c.overshoots]
    if over:
        shown = ", ".join(_share(c) for c in over[:5]) + (
            f" and {len(over) - 5} more" if len(over) > 5 else ""
        )
        value = "force"
        reasons = [
            f"{len(over)} of {len(containers)} containers use more SM than their limit "
            f"({tables.CORE_QUANTILE_NAME} > {tables.CORE_OVERSHOOT_RATIO} x limit): {shown}; "
            "core isolation is imprecise: force (docs/guides/tuning.md §6.1)"
        ]
    elif environment == "development":
        value = tables.CORE_POLICY["development"]
        reasons = [
            f"no container exceeds its limit, and in development the template turns the limit off: "
            f"{value} (docs/guides/tuning.md §6.2)"
        ]
    else:
        value = current
        reasons = [f"all {len(containers)} containers stay within their limits: keep {current}"]
    return Recommendation(POLICY, value, current, tuple(reasons), evidence)


def gpucores_for(c: ContainerCores) -> int:
    """The p95 with headroom, rounded up to a step, between one step and 100."""
    wanted = math.ceil(c.used_p95 * tables.CORE_HEADROOM / tables.CORE_STEP) * tables.CORE_STEP
    return int(min(100, max(tables.CORE_STEP, wanted)))


def recommend_gpucores(
    containers: list[ContainerCores], evidence: tuple[Evidence, ...] = ()
) -> Recommendation:
    details: dict[str, str] = {}
    reasons: list[str] = []
    for c in sorted(containers, key=lambda c: c.name):
        if not (c.overshoots or c.underused):
            continue
        proposal = gpucores_for(c)
        if proposal == int(c.limit):
            continue
        details[f"pod/{c.name}"] = str(proposal)
        why = "uses more than it asked" if c.overshoots else (
            "stays below half its limit "
            "(docs/guides/tuning.md §5)"
        )
        reasons.append(f"{_share(c)}: {why}; gpucores {proposal} (p95 x {tables.CORE_HEADROOM}, step 5)")
    if not details:
        reasons.append(f"all {len(containers)} containers use between half and all of their gpucores")
        return Recommendation(GPUCORES, "as requested", "as requested", tuple(reasons), evidence)
    value = ", ".join(f"{k.removeprefix('pod/')}={v}" for k, v in details.items())
    return Recommendation(GPUCORES, value, "as requested", tuple(reasons), evidence, details=details)
