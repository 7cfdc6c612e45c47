"""ResourceQuota on HAMi resources (§6.4): ``limits.<memory name>`` and ``limits.<core name>``.

Only ``spec.hard`` keys ``limits.nvidia.com/gpumem`` and ``limits.nvidia.com/gpucores`` (names from
the device config) with exact-integer quantities count. An explicit limit of 0 blocks; a namespace
without limits is unconstrained. Memory limits are scaled by ``memoryFactor`` like the requests.

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami.core.objects import namespace_of
from hami.scheduler.engine.device_config import NvidiaConfig
from hami.scheduler.engine.requests import int_quantity
from hami.scheduler.engine.usage import DeviceShare, quota_usage


@dataclass
class QuotaEntry:
    used: int = 0
    limit: int = 0
    limit_set: bool = False


class QuotaManager:
    """Namespace -> resource name -> usage and limit; not thread-safe (callers lock)."""

    def __init__(self, cfg: NvidiaConfig) -> None:
        self._cfg = cfg
        self._names = {cfg.resource_memory_name, cfg.resource_core_name} - {""}
        self._ns: dict[str, dict[str, QuotaEntry]] = {}

    def _limits(self, quota: Mapping[str, Any]) -> tuple[str, dict[str, int]]:
        namespace = namespace_of(quota)
        spec = quota.get("spec")
        hard = spec.get("hard") if isinstance(spec, Mapping) else None
        limits: dict[str, int] = {}
        if isinstance(hard, Mapping):
            for key, value in hard.items():
                name = key.removeprefix("limits.")
                if name != key and name in self._names:
                    amount = int_quantity(value)
                    if amount is not None:
                        limits[name] = amount
        return namespace, limits

    def add_quota(self, quota: Mapping[str, Any]) -> None:
        """A ResourceQuota was added; with several per namespace the last one wins per key."""
        namespace, limits = self._limits(quota)
        entries = self._ns.setdefault(namespace, {})
        for name, limit in limits.items():
            entry = entries.setdefault(name, QuotaEntry())
            entry.limit, entry.limit_set = limit, True

    def delete_quota(self, quota: Mapping[str, Any]) -> None:
        namespace, limits = self._limits(quota)
        entries = self._ns.get(namespace, {})
        for name in limits:
            entry = entries.get(name)
            if entry is not None:
                entry.limit, entry.limit_set = 0, False

    def update_quota(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self.delete_quota(old)
        self.add_quota(new)

    def add_usage(self, namespace: str, shares: tuple[DeviceShare, ...]) -> None:
        self._change(namespace, shares, 1)

    def remove_usage(self, namespace: str, shares: tuple[DeviceShare, ...]) -> None:
        self._change(namespace, shares, -1)

    def _change(self, namespace: str, shares: tuple[DeviceShare, ...], sign: int) -> None:
        mem, cores = quota_usage(shares)
        entries = self._ns.setdefault(namespace, {})
        for name, amount in ((self._cfg.resource_memory_name, mem), (self._cfg.resource_core_name, cores)):
            if not name:
                continue
            entry = entries.setdefault(name, QuotaEntry())
            entry.used = max(entry.used + sign * amount, 0)

    def entry(self, namespace: str, name: str) -> QuotaEntry | None:
        return self._ns.get(namespace, {}).get(name)

    def items(self) -> list[tuple[str, str, QuotaEntry]]:
        """(namespace, resource name, entry) for every tracked resource (for metrics)."""
        return [(ns, name, e) for ns, entries in self._ns.items() for name, e in entries.items()]

    def limited(self, namespace: str) -> bool:
        """Whether any HAMi limit applies in the namespace (lets Fit skip quota work otherwise)."""
        return any(e.limit_set for e in self._ns.get(namespace, {}).values())

    def fits(self, namespace: str, mem: int, cores: int, credit: tuple[int, int] = (0, 0)) -> bool:
        """HAMi ``FitQuota``: would ``mem``/``cores`` more stay within the limits?

        ``credit`` is usage to leave out (a re-filtered pod's previous reservation).
        """
        entries = self._ns.get(namespace)
        if not entries:
            return True
        mem_entry = entries.get(self._cfg.resource_memory_name)
        if mem_entry is not None and mem_entry.limit_set:
            used = max(mem_entry.used - credit[0], 0)
            if used + mem > mem_entry.limit * self._cfg.factor:
                return False
        core_entry = entries.get(self._cfg.resource_core_name)
        if core_entry is not None and core_entry.limit_set:
            used = max(core_entry.used - credit[1], 0)
            if used + cores > core_entry.limit:
                return False
        return True
