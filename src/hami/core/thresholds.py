"""The one file of alert thresholds, selectors and durations (``thresholds.yaml`` beside this module).

The alert and recording rules (``alerts/``), the dashboards' threshold lines, the monitoring mixin's
defaults and ``hami-doctor`` all read it, so an alert and the doctor judge the same object by the
same number. It ships inside the package because the doctor runs from the installed image.
"""

from __future__ import annotations

from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from hami.core.duration import parse_prometheus_duration

PATH = Path(str(resources.files("hami.core").joinpath("thresholds.yaml")))


def load(path: Path = PATH) -> dict[str, Any]:
    """The whole file as data (``thresholds``, ``for``, ``windows``, ``jobs``, selectors)."""
    with path.open(encoding="utf-8") as f:
        data: dict[str, Any] = yaml.safe_load(f)
    return data


def alert_for(name: str, data: dict[str, Any] | None = None) -> timedelta:
    """How long the condition of the alert keyed ``name`` under ``for:`` must hold before it fires."""
    return parse_prometheus_duration(str((data or load())["for"][name]))
