"""The one file of alert thresholds, selectors and durations (``thresholds.yaml`` beside this module).

The alert and recording rules (``alerts/``), the dashboards' threshold lines, the monitoring mixin's
defaults and ``hami-doctor`` all read it, so an alert and the doctor judge the same object by the
same number. It ships inside the package because the doctor runs from the installed image.
"""

from __future__ import annotations

import re
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

PATH = Path(str(resources.files("hami.core").joinpath("thresholds.yaml")))

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PROM_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w)")


def load(path: Path = PATH) -> dict[str, Any]:
    """The whole file as data (``thresholds``, ``for``, ``windows``, ``jobs``, selectors)."""
    with path.open(encoding="utf-8") as f:
        data: dict[str, Any] = yaml.safe_load(f)
    return data


def prometheus_duration(text: str) -> timedelta:
    """A Prometheus duration of the file (``3m``, ``1h30m``, ``0m``) as a timedelta."""
    parts = _PROM_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return timedelta(seconds=sum(int(n) * _UNITS[u] for n, u in parts))


def alert_for(name: str, data: dict[str, Any] | None = None) -> timedelta:
    """How long the condition of the alert keyed ``name`` under ``for:`` must hold before it fires."""
    return prometheus_duration(str((data or load())["for"][name]))
