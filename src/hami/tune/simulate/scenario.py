"""Scenarios: the configuration a replay runs under, and ``--set`` to describe one.

The current configuration is the snapshot's own. An alternative changes some of the settings the
tuning guide turns: ``deviceSplitCount``, ``deviceMemoryScaling`` and ``deviceCoreScaling`` (the
device plugin's, which change what every node registers; ``NAME@NODE=`` for one node, as the
plugin's per-node config does), ``nodeSchedulerPolicy`` / ``gpuSchedulerPolicy`` (``policy`` sets
both) and ``nodeLockExpire``.

``--set`` takes ``key=value[,key=value...]``: one ``--set`` is one alternative, so
``--set deviceSplitCount=20 --set policy=spread`` compares three configurations and
``--set deviceSplitCount=20,policy=spread`` two.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from hami.core.duration import DurationError, parse_duration

NODE_POLICIES: Final = ("binpack", "spread")
GPU_POLICY_TOKENS: Final = ("binpack", "spread", "topology-aware", "mutex", "numa")
KEYS: Final = (
    "deviceSplitCount",
    "deviceMemoryScaling",
    "deviceCoreScaling",
    "nodeSchedulerPolicy",
    "gpuSchedulerPolicy",
    "policy",
    "nodeLockExpire",
)


MAX_SCALING: Final = 100.0  # no device plugin registers a card at more than 100 times its memory


class ScenarioError(ValueError):
    """A ``--set`` that cannot be applied; the text says which part and what is accepted."""


@dataclass(frozen=True)
class Scenario:
    """Overrides of the snapshot's configuration; None keeps the snapshot's value."""

    name: str = "current"
    split_count: int | None = None
    memory_scaling: float | None = None
    core_scaling: float | None = None
    node_memory_scaling: Mapping[str, float] = field(default_factory=dict)
    node_split_count: Mapping[str, int] = field(default_factory=dict)
    node_policy: str | None = None
    gpu_policy: str | None = None
    node_lock_expire: float | None = None  # seconds

    @property
    def changes_devices(self) -> bool:
        return any(
            (
                self.split_count,
                self.memory_scaling,
                self.core_scaling,
                self.node_memory_scaling,
                self.node_split_count,
            )
        )


CURRENT: Final = Scenario()


def _positive(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 < value <= MAX_SCALING:
        raise ScenarioError(f"{key}={text}: want a number greater than 0, at most {MAX_SCALING:g}")
    return value


def _split(key: str, text: str) -> int:
    if not text.strip().isdigit() or not 1 <= int(text) <= 1000:
        raise ScenarioError(f"{key}={text}: want a whole number from 1 to 1000")
    return int(text)


def _gpu_policy(text: str) -> str:
    tokens = [t.strip() for t in text.split(",")]
    bad = [t for t in tokens if t not in GPU_POLICY_TOKENS]
    if bad:
        raise ScenarioError(
            f"gpuSchedulerPolicy={text}: unknown {bad[0]!r} (known: {', '.join(GPU_POLICY_TOKENS)})"
        )
    return text


def _node_policy(key: str, text: str) -> str:
    if text not in NODE_POLICIES:
        raise ScenarioError(f"{key}={text}: want one of {', '.join(NODE_POLICIES)}")
    return text


def parse_set(text: str) -> Scenario:
    """One ``--set`` argument as a scenario named after it."""
    scenario = Scenario(name=text)
    if not text.strip():
        raise ScenarioError("--set needs key=value (keys: " + ", ".join(KEYS) + ")")
    # gpuSchedulerPolicy values may contain commas (chain mode): a part without '=' continues it.
    parts: list[str] = []
    for part in text.split(","):
        if "=" not in part and parts:
            parts[-1] += "," + part
        else:
            parts.append(part)
    seen: set[str] = set()
    for part in parts:
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        base, _, node = key.partition("@")
        if not sep or base not in KEYS:
            raise ScenarioError(f"--set {part!r}: want key=value with key one of {', '.join(KEYS)}")
        if key in seen:
            raise ScenarioError(f"--set {text!r}: {key} given twice")
        seen.add(key)
        if node and base not in ("deviceMemoryScaling", "deviceSplitCount"):
            raise ScenarioError(f"--set {part!r}: only deviceMemoryScaling and deviceSplitCount take @NODE")
        scenario = _apply(scenario, base, node, value)
    return scenario


def _apply(s: Scenario, key: str, node: str, value: str) -> Scenario:
    if key == "deviceSplitCount":
        count = _split(key, value)
        return (
            replace(s, node_split_count={**s.node_split_count, node: count})
            if node
            else replace(s, split_count=count)
        )
    if key == "deviceMemoryScaling":
        factor = _positive(key, value)
        if node:
            return replace(s, node_memory_scaling={**s.node_memory_scaling, node: factor})
        return replace(s, memory_scaling=factor)
    if key == "deviceCoreScaling":
        return replace(s, core_scaling=_positive(key, value))
    if key == "nodeSchedulerPolicy":
        return replace(s, node_policy=_node_policy(key, value))
    if key == "gpuSchedulerPolicy":
        return replace(s, gpu_policy=_gpu_policy(value))
    if key == "policy":
        return replace(s, node_policy=_node_policy(key, value), gpu_policy=value)
    try:
        seconds = parse_duration(value, bare_seconds=True).total_seconds()
    except DurationError as err:
        raise ScenarioError(f"nodeLockExpire={value}: {err} (use e.g. 3m, 90s, 1h30m)") from None
    if seconds <= 0:
        raise ScenarioError(f"nodeLockExpire={value}: must be longer than 0")
    return replace(s, node_lock_expire=seconds)
