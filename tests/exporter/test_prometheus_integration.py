"""Debian's real Prometheus scrapes the monitor on a simulated node; promtool lints a live scrape."""

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from hami.exporter.config import load_config
from hami.exporter.main import Monitor
from hami.testing import prometheus
from hami.testing.dashqueries import Prometheus
from hami.testing.simnode import SimNode
from hami.testing.wait import wait_until

pytestmark = pytest.mark.skipif(not prometheus.available(), reason="prometheus/promtool not installed")


@pytest.fixture
def monitor(tmp_path: Path) -> Iterator[Monitor]:
    node = SimNode(str(tmp_path / "hook"), gpus=2, containers=4)
    cfg = load_config(
        ["--metrics-bind-address", "127.0.0.1:0", "--pod-labels-allowlist", "app"],
        {"HOOK_PATH": node.hook_path, "NODE_NAME": "sim-node"},
    )
    node.start(0.2)
    mon = Monitor(cfg, node.nvml, node.pods, lambda: {c.pod_uid for c in node.containers})
    mon.start()
    try:
        yield mon
    finally:
        mon.stop()
        node.stop()


def test_promtool_clean_on_live_scrape(monitor: Monitor) -> None:
    assert monitor.server is not None
    body = requests.get(monitor.server.url + "/metrics", timeout=10).text
    assert "hami_vgpu_memory_used_bytes{" in body and "hami_host_gpu_power_watts{" in body
    lint = subprocess.run(
        [prometheus.PROMTOOL, "check", "metrics"],
        input=body,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    findings = [line for line in (lint.stdout + lint.stderr).splitlines() if line.strip()]
    assert findings == [], findings


def test_prometheus_scrapes_and_queries(monitor: Monitor, tmp_path: Path) -> None:
    assert monitor.server is not None
    target = monitor.server.url.split("://", 1)[1]
    config = (
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs:\n- job_name: hami-monitor\n  static_configs: [{{targets: ['{target}']}}]\n"
    )
    with prometheus.PrometheusServer(tmp_path / "data", config) as server:
        prom = Prometheus(server.url, timeout=5)
        result = wait_until(
            lambda: prom.query('hami_vgpu_memory_used_bytes{node="sim-node"} > 0'),
            90,
            "Prometheus to store a non-zero hami_vgpu_memory_used_bytes",
            interval=0.5,
        )
        assert prom.query("up")[0]["value"][1] == "1"
        labels = result[0]["metric"]
        assert isinstance(labels, dict)
        assert {"namespace", "pod", "container", "vdevice_index", "device_uuid", "node", "zone"} <= set(
            labels
        )
