"""Health decisions (§C.9 and beyond) and the per-GPU health state that ListAndWatch streams.

HAMi's behaviour is the default: a critical Xid (or a failed event registration or wait) marks the
device unhealthy until the plugin restarts (kubelet restart, SIGHUP or process restart re-create the
state). Past HAMi, and only where the operator opts in (``--health-checks`` / ``HAMI_HEALTH_CHECKS``),
four more conditions mark a device unhealthy, each under its own reason; these come back when NVML
says the condition has gone:

- ``ecc``: a double-bit ECC event, or a non-zero volatile uncorrected ECC count (NVML resets that
  counter when the GPU is reset or the driver reloaded, which is how the device recovers);
- ``retired-pages``: pages retired but waiting for a reset, or a row remap that failed;
- ``temperature``: the GPU at or above its slowdown threshold; it comes back 5 °C below it, so a card
  hovering at the threshold does not flap in and out of the kubelet's allocatable count;
- ``device-lost``: NVML no longer finds the device (fallen off the bus); back when found again.

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hami.core.nvml import RemappedRows, RetiredPages

# Application errors, never a sign of a broken GPU.
IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})

# Opt-in checks, as named on the command line.
CHECK_ECC = "ecc"
CHECK_RETIRED_PAGES = "retired-pages"
CHECK_TEMPERATURE = "temperature"
CHECK_DEVICE_LOST = "device-lost"
CHECKS = (CHECK_ECC, CHECK_RETIRED_PAGES, CHECK_TEMPERATURE, CHECK_DEVICE_LOST)

# Why a device is unhealthy; each is also a value of hami_deviceplugin_health_events_total{event}.
XID_CRITICAL = "xid_critical"
WAIT_ERROR = "wait_error"
REGISTRATION_FAILED = "registration_failed"
ECC_DOUBLE_BIT = "ecc_double_bit"
RETIRED_PAGES_PENDING = "retired_pages_pending"
ROW_REMAP_FAILURE = "row_remap_failure"
TEMPERATURE_SLOWDOWN = "temperature_slowdown"
DEVICE_LOST = "device_lost"
# The reasons a later NVML reading can clear (the rest are HAMi's, and sticky).
RECOVERABLE = frozenset(
    {ECC_DOUBLE_BIT, RETIRED_PAGES_PENDING, ROW_REMAP_FAILURE, TEMPERATURE_SLOWDOWN, DEVICE_LOST}
)
TEMPERATURE_RECOVERY_MARGIN_C = 5


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


def parse_health_checks(text: str, disable_env: str = "") -> frozenset[str]:
    """The opt-in checks of ``--health-checks`` (comma list of ``CHECKS`` or ``all``).

    ``DP_DISABLE_HEALTHCHECKS=all`` turns every health check off, these included (``xids`` only
    HAMi's Xid checks)."""
    names = {part.strip().lower() for part in text.split(",") if part.strip()}
    if "all" in names:
        names = (names - {"all"}) | set(CHECKS)
    unknown = names - set(CHECKS)
    if unknown:
        raise ValueError(
            f"--health-checks: unknown check(s) {', '.join(sorted(unknown))}; "
            f"use a comma list of {', '.join(CHECKS)} or all"
        )
    if disable_env.strip().lower() == "all":
        return frozenset()
    return frozenset(names)


@dataclass(frozen=True)
class Reading:
    """One poll of a device's conditions; ``None`` where NVML could not say (unsupported, failed).

    ``lost`` is the error that made NVML lose the device, empty while it answers.
    """

    lost: str = ""
    ecc_uncorrected: int | None = None
    retired: RetiredPages | None = None
    remapped: RemappedRows | None = None
    temperature: int | None = None
    slowdown: int | None = None


def judge(reading: Reading, checks: frozenset[str], active: Mapping[str, str]) -> dict[str, str]:
    """The opt-in reasons active after ``reading`` (reason -> detail), given those active before.

    A reading NVML could not take leaves its reason as it was: only NVML can say a device recovered.
    """
    now = {r: d for r, d in active.items() if r in RECOVERABLE}
    if CHECK_DEVICE_LOST in checks:
        if reading.lost:
            now[DEVICE_LOST] = f"NVML no longer finds the device ({reading.lost})"
            return now  # nothing else can be read from a device that is gone
        now.pop(DEVICE_LOST, None)
    if CHECK_ECC in checks and reading.ecc_uncorrected is not None:
        if reading.ecc_uncorrected > 0:
            now[ECC_DOUBLE_BIT] = f"{reading.ecc_uncorrected} uncorrected ECC errors since the last reset"
        else:
            now.pop(ECC_DOUBLE_BIT, None)
    if CHECK_RETIRED_PAGES in checks:
        if reading.retired is not None:
            if reading.retired.pending:
                now[RETIRED_PAGES_PENDING] = (
                    f"retired pages wait for a GPU reset ({reading.retired.double_bit} double-bit, "
                    f"{reading.retired.single_bit} single-bit)"
                )
            else:
                now.pop(RETIRED_PAGES_PENDING, None)
        if reading.remapped is not None:
            if reading.remapped.failure:
                now[ROW_REMAP_FAILURE] = (
                    f"row remapping failed ({reading.remapped.uncorrectable} rows remapped for "
                    "uncorrectable errors)"
                )
            else:
                now.pop(ROW_REMAP_FAILURE, None)
    if CHECK_TEMPERATURE in checks and reading.temperature is not None and reading.slowdown is not None:
        hot = reading.temperature >= reading.slowdown
        cooled = reading.temperature <= reading.slowdown - TEMPERATURE_RECOVERY_MARGIN_C
        if hot:
            now[TEMPERATURE_SLOWDOWN] = (
                f"temperature {reading.temperature} C at or above the slowdown threshold {reading.slowdown} C"
            )
        elif cooled:
            now.pop(TEMPERATURE_SLOWDOWN, None)
    return now


class HealthState:
    """Per-UUID active reasons; a device is healthy with none. Streams wait on a generation that
    moves only when some device's healthy/unhealthy answer changes."""

    def __init__(self, uuids: Iterable[str] = ()) -> None:
        self._cond = threading.Condition()
        self._reasons: dict[str, dict[str, str]] = {u: {} for u in uuids}
        self._generation = 0
        self._closed = False

    def snapshot(self) -> tuple[int, dict[str, bool]]:
        with self._cond:
            return self._generation, {u: not r for u, r in self._reasons.items()}

    def reasons(self, uuid: str) -> dict[str, str]:
        with self._cond:
            return dict(self._reasons.get(uuid, {}))

    def set_reason(self, uuid: str, reason: str, detail: str | None) -> bool:
        """Activate (``detail`` given) or clear (``None``) one reason; True when the device's
        health changed. Unknown devices are ignored."""
        with self._cond:
            reasons = self._reasons.get(uuid)
            if reasons is None:
                return False
            was_healthy = not reasons
            if detail is None:
                reasons.pop(reason, None)
            else:
                reasons[reason] = detail
            changed = was_healthy != (not reasons)
            if changed:
                self._generation += 1
                self._cond.notify_all()
            return changed

    def mark_unhealthy(self, uuid: str) -> bool:
        """HAMi's Xid path: True when this made a healthy device unhealthy."""
        return self.set_reason(uuid, XID_CRITICAL, "critical Xid")

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
