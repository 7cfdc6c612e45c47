"""A daemon that cannot start says so and exits at once; SIGTERM stops it on time, even mid-request."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import requests
import yaml

from hami.testing import cluster
from hami.testing.builders import gpu_node
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.processes import free_port, log_tail
from hami.testing.wait import wait_until

EXIT_WITHIN_S = 15.0


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def run_until_exit(argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> int:
    """The exit status of a daemon that must end by itself, within ``EXIT_WITHIN_S``."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *argv], stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        try:
            code = proc.wait(EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise AssertionError(f"still running after {EXIT_WITHIN_S}s: {log_tail(log)}") from None
    return code


def test_the_scheduler_exits_at_once_when_its_metrics_port_is_taken(
    tmp_path: Path, kube_config_file: Path, taken_port: int
) -> None:
    log = tmp_path / "scheduler.log"
    code = run_until_exit(
        ["-m", "hami.scheduler", "--http_bind", "127.0.0.1:0",
         "--metrics-bind-address", f"127.0.0.1:{taken_port}", "--kubeconfig", str(kube_config_file)],
        log,
    )
    assert code != 0
    text = log.read_text(encoding="utf-8")
    assert "cannot listen" in text and "--metrics-bind-address" in text and "Traceback" not in text


def test_the_monitor_exits_at_once_when_its_port_is_taken(
    tmp_path: Path, kube_config_file: Path, taken_port: int
) -> None:
    log = tmp_path / "monitor.log"
    code = run_until_exit(
        ["-m", "hami.exporter", "--metrics-bind-address", f"127.0.0.1:{taken_port}",
         "--kubeconfig", str(kube_config_file)],
        log, {"HOOK_PATH": str(tmp_path / "hook"), "NODE_NAME": "n1"},
    )
    assert code == 1
    text = log.read_text(encoding="utf-8")
    assert "cannot start" in text and "--metrics-bind-address" in text and "Traceback" not in text


def test_the_device_plugin_exits_at_once_when_its_port_is_taken(
    tmp_path: Path, kube_config_file: Path, taken_port: int
) -> None:
    spec = tmp_path / "nvml.yaml"
    spec.write_text(yaml.safe_dump(cluster.fake_nvml_spec(1)), encoding="utf-8")
    log = tmp_path / "plugin.log"
    code = run_until_exit(
        ["-m", "hami.deviceplugin", "--node-name", "n1", "--nvml", "fake", "--fake-nvml-spec", str(spec),
         "--device-plugin-path", str(tmp_path / "dp"), "--kubelet-socket", "", "--node-config-file", "",
         "--metrics-bind-address", f"127.0.0.1:{taken_port}", "--kubeconfig", str(kube_config_file)],
        log,
    )
    assert code == 1
    text = log.read_text(encoding="utf-8")
    assert "cannot serve metrics" in text and "Traceback" not in text


def test_sigterm_stops_the_scheduler_mid_request(
    tmp_path: Path, kube_api: KubeAPIServer, kube_config_file: Path
) -> None:
    kube_api.store.put(gpu_node("n1", gpus=1))
    pod = kube_api.store.put({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    })
    hang = kube_api.faults.add(method="POST", path="/pods/p/binding", delay=60)  # the bind hangs
    http, metrics = free_port(), free_port()
    log = (tmp_path / "scheduler.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hami.scheduler", "--http_bind", f"127.0.0.1:{http}",
         "--metrics-bind-address", f"127.0.0.1:{metrics}", "--kubeconfig", str(kube_config_file),
         "--kube-timeout", "120"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        def ready() -> bool:
            try:
                return requests.get(f"http://127.0.0.1:{metrics}/readyz", timeout=2).status_code == 200
            except requests.RequestException:
                return False
        wait_until(ready, 30, "the scheduler's caches")

        filtered = requests.post(f"http://127.0.0.1:{http}/filter", json={"Pod": pod, "NodeNames": ["n1"]},
                                 timeout=30)
        assert filtered.json()["NodeNames"] == ["n1"]

        def bind_pod() -> None:
            args = {"PodName": "p", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": "n1"}
            with contextlib.suppress(requests.RequestException):  # cut off by the stop, or answered
                requests.post(f"http://127.0.0.1:{http}/bind", json=args, timeout=60)

        caller = threading.Thread(target=bind_pod)
        caller.start()
        wait_until(lambda: hang.hits >= 1, 10, "the bind's Binding call")  # the request is in flight
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(EXIT_WITHIN_S) == 0  # TimeoutExpired otherwise: the grace period's bound
        caller.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()
