"""Shared rule builders: the config's thresholds, selectors and durations, and the rule dict shapes."""

from __future__ import annotations

from typing import Any

# Identity of one vGPU of one container in the monitor's series (contract rule 4).
CONTAINER_KEYS = "namespace, pod, container, vdevice_index"


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
