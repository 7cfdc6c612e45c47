"""Health decisions (§C.9) and the shared per-GPU health state that ListAndWatch streams.

Recovery follows HAMi: a device marked unhealthy stays so until the plugin is restarted (kubelet
restart, SIGHUP or process restart re-create the state). There is no automatic way back.

Section signs (§) refer to docs/design/node-agent.md.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

# Application errors, never a sign of a broken GPU.
IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})


@dataclass(frozen=True)
class XidPolicy:
    checks_disabled: bool = False
    disabled: frozenset[int] = frozenset()
    enabled: frozenset[int] = frozenset()

    def is_critical(self, xid: int) -> bool:
        """True when this Xid marks the device unhealthy; an explicit enable beats every ignore."""
        if xid in self.enabled:
            return True
        return xid not in IGNORED_XIDS and xid not in self.disabled


def _xids(text: str, env: str) -> frozenset[int]:
    out: set[int] = set()
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        try:
            out.add(int(part))
        except ValueError:
            raise ValueError(f"{env}: {part!r} is not an Xid number") from None
    return frozenset(out)


def parse_xid_policy(disable_env: str, enable_env: str) -> XidPolicy:
    """``DP_DISABLE_HEALTHCHECKS`` (Xid list, or ``all``/``xids``) and ``DP_ENABLE_HEALTHCHECKS``."""
    disable = disable_env.strip().lower()
    if disable in {"all", "xids"}:
        return XidPolicy(checks_disabled=True)
    return XidPolicy(
        disabled=_xids(disable, "DP_DISABLE_HEALTHCHECKS"),
        enabled=_xids(enable_env, "DP_ENABLE_HEALTHCHECKS"),
    )


class HealthState:
    """Per-UUID health with a generation counter that streams wait on."""

    def __init__(self, uuids: Iterable[str] = ()) -> None:
        self._cond = threading.Condition()
        self._healthy = dict.fromkeys(uuids, True)
        self._generation = 0
        self._closed = False

    def snapshot(self) -> tuple[int, dict[str, bool]]:
        with self._cond:
            return self._generation, dict(self._healthy)

    def mark_unhealthy(self, uuid: str) -> bool:
        """Returns True when this changed anything (a device already unhealthy stays so)."""
        with self._cond:
            if not self._healthy.get(uuid, False):
                return False
            self._healthy[uuid] = False
            self._generation += 1
            self._cond.notify_all()
            return True

    def wait_change(self, seen: int, timeout: float) -> int | None:
        """Blocks until the generation passes ``seen``; None when closed, ``seen`` on timeout."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._generation != seen, timeout)
            if self._closed:
                return None
            return self._generation

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
