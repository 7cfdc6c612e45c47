"""Scheduling policies (§3.4, §4.4, §4.8, docs/design/scheduler.md §9.2): GPU ordering, node choice,
device-scoring weights.

Section signs (§) refer to docs/design/scheduler-filter.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from hami.core import annotations as ann

BINPACK: Final = "binpack"
SPREAD: Final = "spread"
MUTEX: Final = "mutex"
TOPOLOGY_AWARE: Final = "topology-aware"
NUMA: Final = "numa"

T = TypeVar("T")

DEFAULT_NODE_POLICY: Final = BINPACK
DEFAULT_GPU_POLICY: Final = SPREAD


class ScoringWeightsError(ValueError):
    """An invalid ``hami.io/device-scoring-weights`` annotation; the pod cannot be scheduled."""


@dataclass(frozen=True)
class Weights:
    slot: int = 1
    core: int = 1
    memory: int = 1


def _q(text: str) -> str:
    """Go's ``%q`` for the printable text annotations carry."""
    return json.dumps(text, ensure_ascii=False)


def parse_scoring_weights(value: str | None) -> Weights:
    """``slot=<int>,core=<int>,memory=<int>``: all three, non-negative, at least one positive."""
    if value is None:
        return Weights()

    def bad(why: str) -> ScoringWeightsError:
        return ScoringWeightsError(f"invalid {ann.POD_DEVICE_SCORING_WEIGHTS} annotation {_q(value)}: {why}")

    parts = value.split(",")
    if len(parts) != 3:
        raise bad(f"expected 3 comma-separated weights, got {len(parts)}")
    seen: dict[str, int] = {}
    for part in parts:
        key, sep, number = part.partition("=")
        key, number = key.strip(), number.strip()
        if not sep:
            raise bad(f"{_q(part.strip())} is not key=value")
        if key not in ("slot", "core", "memory"):
            raise bad(f"unknown weight {_q(key)}")
        if key in seen:
            raise bad(f"duplicate weight {_q(key)}")
        try:
            weight = int(number)
        except ValueError:
            raise bad(f"{_q(key)} weight {_q(number)} is not an integer") from None
        if weight < 0:
            raise bad(f"{_q(key)} weight must not be negative")
        seen[key] = weight
    if not any(seen.values()):
        raise bad("at least one weight must be positive")
    return Weights(slot=seen["slot"], core=seen["core"], memory=seen["memory"])


@dataclass(frozen=True)
class GpuPolicy:
    """A GPU policy string as Fit and the device sort read it."""

    raw: str
    mutex: bool  # skip cards already in use
    topology: bool  # collect all candidates, choose by pair scores
    chain: tuple[str, ...] | None  # chain mode keys (binpack/spread/numa), None outside chain mode


def parse_gpu_policy(raw: str) -> GpuPolicy:
    tokens = [t.strip() for t in raw.split(",")]
    chain: tuple[str, ...] | None = None
    if "," in raw or raw == NUMA:
        keys: list[str] = []
        for t in tokens:
            if t in (BINPACK, SPREAD, NUMA) and t not in keys:
                keys.append(t)
        chain = tuple(keys) or (SPREAD,)
    return GpuPolicy(raw=raw, mutex=MUTEX in tokens, topology=TOPOLOGY_AWARE in tokens, chain=chain)


SortKey = Callable[[int], tuple[float, ...]]


def device_sort_key(
    policy: GpuPolicy, numa_bind: bool, *, scores: Sequence[float], numas: Sequence[int],
    useds: Sequence[int], indexes: Sequence[int],
) -> SortKey:
    """Key for an ascending sort of device positions equivalent to HAMi's ``Less`` (§4.4).

    Fit walks the sorted list from the END, so the last element is tried first.
    """
    if policy.chain is not None:
        keys = list(policy.chain)
        if numa_bind and keys[0] != NUMA:
            if NUMA in keys:
                keys.remove(NUMA)
            keys.insert(0, NUMA)
        signs = [(1.0 if k == BINPACK else -1.0, k == NUMA) for k in keys]

        def chain_key(i: int) -> tuple[float, ...]:
            parts = [float(numas[i]) if is_numa else sign * scores[i] for sign, is_numa in signs]
            return (*parts, float(indexes[i]))

        return chain_key
    if policy.raw == MUTEX:
        return lambda i: (-useds[i], numas[i])
    if numa_bind:
        if policy.raw == BINPACK:
            return lambda i: (-numas[i], scores[i])
        return lambda i: (numas[i], -scores[i])
    if policy.raw == BINPACK:
        return lambda i: (scores[i], numas[i])
    return lambda i: (-scores[i], numas[i])


def pick_node(policy: str, fits: Sequence[T], score: Callable[[T], float]) -> list[T]:
    """Fitting nodes in HAMi's sorted order (§4.8); the chosen node is the LAST one.

    ``score`` reads a node's score from an element of ``fits``. spread sorts by
    descending score (lowest chosen), everything else ascending (highest chosen). HAMi breaks ties
    by goroutine timing; here the node listed first in the request wins.
    """
    # A stable sort of the reversed list puts, among equal scores, the node listed first last.
    return sorted(reversed(fits), key=score, reverse=policy == SPREAD)
