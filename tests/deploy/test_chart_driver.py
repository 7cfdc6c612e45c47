"""The chart's values for the driver as a second source of truth: the node's memory enforcement and the
monitor's cgroup root (docs/design/node-agent-monitor.md §B.6,
docs/design/node-agent-device-plugin.md §C.11)."""

from __future__ import annotations

from typing import Any

import pytest

from hami.core import names
from hami.deviceplugin.main import build_parser
from hami.exporter.config import load_config
from hami.testing import chart

Obj = dict[str, Any]


def _spec(objects: list[Obj], daemonset: str) -> Obj:
    spec: Obj = chart.find(objects, "DaemonSet", daemonset)["spec"]["template"]["spec"]
    return spec


def _plugin_args(objects: list[Obj]) -> list[str]:
    spec = _spec(objects, names.DEVICE_PLUGIN_DAEMONSET)
    (c,) = [c for c in spec["containers"] if c["name"] == names.DEVICE_PLUGIN_CONTAINER]
    return list(c["args"])


def test_memory_enforcement_reaches_the_device_plugin() -> None:
    assert not [a for a in _plugin_args(chart.render()) if a.startswith("--memory-enforcement")]
    args = _plugin_args(chart.render(sets=["devicePlugin.memoryEnforcement=driver"]))
    assert "--memory-enforcement=driver" in args
    assert build_parser().parse_args(args).memory_enforcement == "driver"
    with pytest.raises(chart.ChartError, match="memoryEnforcement"):
        chart.render(sets=["devicePlugin.memoryEnforcement=shim"])


def test_the_monitor_reads_the_hosts_cgroup_root_read_only() -> None:
    spec = _spec(chart.render(), names.MONITOR_DAEMONSET)
    (c,) = [c for c in spec["containers"] if c["name"] == names.MONITOR_CONTAINER]
    cfg = load_config(c["args"], {"HOOK_PATH": "/usr/local/vgpu", "NODE_NAME": "n"})
    assert cfg.cgroup_root == "/sys/fs/cgroup"
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "cgroup"]
    assert (mount["mountPath"], mount["readOnly"]) == ("/sys/fs/cgroup", True)
    (volume,) = [v for v in spec["volumes"] if v["name"] == "cgroup"]
    assert volume["hostPath"]["path"] == "/sys/fs/cgroup"
    off = _spec(chart.render(sets=["devicePlugin.monitor.cgroupRoot="]), names.MONITOR_DAEMONSET)
    assert not [v for v in off["volumes"] if v["name"] == "cgroup"]
