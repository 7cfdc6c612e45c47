"""The latency panels whose histograms carry exemplars show them (docs/design/tracing.md): a slow
bucket leads to the pod's trace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"


def _panel(board: str, title: str) -> dict[str, Any]:
    doc = json.loads((DASHBOARDS / board).read_text(encoding="utf-8"))
    panels = [p for p in doc["panels"] if p.get("title") == title]
    assert len(panels) == 1, title
    found: dict[str, Any] = panels[0]
    return found


@pytest.mark.parametrize(
    ("board", "title", "family"),
    [
        ("hami-scheduler.json", "Filter latency", "hami_scheduler_filter_duration_seconds"),
        ("hami-scheduler.json", "Bind latency", "hami_scheduler_bind_duration_seconds"),
        ("hami-scheduler.json", "Pod creation to bind", "hami_scheduler_pod_creation_to_bind_seconds"),
        ("hami-device-plugin.json", "Allocate latency", "hami_deviceplugin_allocate_duration_seconds"),
    ],
)
def test_latency_panels_show_exemplars(board: str, title: str, family: str) -> None:
    targets = _panel(board, title)["targets"]
    assert targets and all(t.get("exemplar") is True and f"{family}_bucket" in t["expr"] for t in targets)


def test_other_panels_do_not() -> None:
    assert not any(t.get("exemplar") for t in _panel("hami-scheduler.json", "Bind phases (p99)")["targets"])
