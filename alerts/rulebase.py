"""Shared rule builders: the config's thresholds, selectors and durations, and the rule dict shapes."""

from __future__ import annotations

from typing import Any

# Identity of one vGPU of one container in the monitor's series (contract rule 4).
CONTAINER_KEYS = "namespace, pod, container, vdevice_index"

# Width of the hourly tiles, and the interval of the group that records them (hami-tiles.rules): one
# record per hour of `max_over_time(x[1h])`, so that consecutive records tile the timeline and a max over
# days reads 24 samples a day a series instead of every scrape.
TILE = "1h"


class RuleBase:
    """Reads the config once; subclasses add one method per rule group."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.t: dict[str, Any] = cfg["thresholds"]
        self.f: dict[str, str] = cfg["for"]
        self.w: dict[str, str] = cfg["windows"]
        jobs: dict[str, str] = cfg["jobs"]
        self.mon = f'job="{jobs["monitor"]}"'
        self.sch = f'job="{jobs["scheduler"]}"'
        self.dp = f'job="{jobs["deviceplugin"]}"'
        self.ksm: str = cfg["kube_state_metrics_selector"]

    def alert(
        self,
        name: str,
        expr: str,
        for_key: str,
        severity: str,
        *,
        summary: str,
        description: str,
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        assert severity in ("critical", "warning", "info"), severity
        return {
            "alert": name,
            "expr": expr.strip(),
            "for": self.f[for_key],
            "labels": {"severity": severity, **(labels or {})},
            "annotations": {
                "summary": summary,
                "description": description,
                "runbook_url": f"{self.cfg['runbook_base_url']}/{name}.md",
            },
        }

    @staticmethod
    def record(name: str, expr: str) -> dict[str, Any]:
        return {"record": name, "expr": expr.strip()}

    @staticmethod
    def tiled_max(raw: str, tile: str, window: str) -> str:
        """`max_over_time(raw[window])` from the hourly tiles of `raw` (`tile`, recorded every TILE as
        `max_over_time(raw[TILE])`) and the raw series over the last TILE, which the newest tile may not
        cover yet: `window / TILE` samples a series instead of a sample per scrape.

        It covers the window and up to one TILE more at its old end: the oldest tile read may have
        started before the window did, so a peak leaves the result up to an hour after it leaves a raw
        `[window]`, never before (Prometheus 2's ranges include their start, so even on a tile boundary
        the tile that ends where the window starts is read; the promtool test shows it). A tile
        evaluation Prometheus skipped (down across it) loses that hour's raw samples from the result
        until they age out; `promtool tsdb create-blocks-from rules` refills the tile. The tile is an
        instant vector only for 5 minutes after each hourly evaluation (staleness), so it is read here
        with a range function and nowhere as an instant vector. The label `part` keeps the two operands
        apart for `or`, since both carry the raw series' labels, and goes with the max.
        """
        return (
            f"max without (part) (\n"
            f'  label_replace(max_over_time({tile}[{window}]), "part", "tiles", "__name__", ".*")\n'
            f"  or max_over_time({raw}[{TILE}])\n)"
        )
