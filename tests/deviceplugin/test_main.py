"""The ``hami-device-plugin`` process: flags, HAMi's start-up log sequence, :9396 metrics, SIGHUP, SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from hami.core import annotations as ann
from hami.deviceplugin.main import build_parser, main
from hami.deviceplugin.metrics import describe
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.kubelet import FakeKubelet
from hami.testing.pluginrig import NODE, NVML_SPEC
from hami.testing.processes import Daemon, python_env
from hami.testing.wait import wait_until

# HAMi's device-plugin start-up log, in order (the substrings operators grep for).
STARTUP = [
    "Initializing metrics for scheduler",
    "reading config=",
    "Starting GRPC server for 'nvidia.com/gpu'",
    "Starting to serve 'nvidia.com/gpu' on ",
    "Registered device plugin for 'nvidia.com/gpu' with Kubelet",
    "start working on the devices",
    "nvml registered device id=0, memory=49152, type=NVIDIA-Tesla V100-PCIE-32GB, numa=0",
    "patch node with the following annos ",
    "Successfully registered annotation. Next check in 30s seconds...",
    "Starting WatchAndRegister",
]
FAMILIES = [
    "hami_build_info",
    "hami_deviceplugin_allocate_duration_seconds",
    "hami_deviceplugin_allocate_errors_total",
    "hami_deviceplugin_register_total",
    "hami_deviceplugin_register_last_success_timestamp_seconds",
    "hami_deviceplugin_kubelet_registered",
    "hami_device_health",
    "hami_deviceplugin_health_events_total",
    "hami_device_split_limit",
    "hami_device_memory_scaling",
    "hami_device_core_scaling",
    "rest_client_requests_total",
]


def exposed_families(text: str) -> set[str]:
    """Family names in an exposition, counters with _total, standard process/python ones left out."""
    return {
        f.name + ("_total" if f.type == "counter" else "")
        for f in text_string_to_metric_families(text)
        if not f.name.startswith(("process_", "python_")) and not f.name.endswith("_created")
    }


def test_daemon_end_to_end(
    kube_api: KubeAPIServer, kube_client: Any, kube_config_file: Path, short_dir: Path
) -> None:
    client.CoreV1Api(kube_client).create_node({"metadata": {"name": NODE}})
    spec = short_dir / "nvml.yaml"
    spec.write_text(yaml.safe_dump(NVML_SPEC), encoding="utf-8")
    device_config = short_dir / "device-config.yaml"
    device_config.write_text(
        "nvidia:\n  deviceSplitCount: 10\n  deviceMemoryScaling: 1.5\n  deviceCoreScaling: 1\n"
    , encoding="utf-8")
    kubelet = FakeKubelet(short_dir)
    kubelet.start()
    cmd = [
        sys.executable, "-m", "hami.deviceplugin",
        f"--kubeconfig={kube_config_file}",
        "--nvml=fake", f"--fake-nvml-spec={spec}",
        f"--device-plugin-path={short_dir}",
        f"--config-file={device_config}", "--node-config-file=",
        f"--hook-path={short_dir / 'hook'}", f"--vgpu-lock-dir={short_dir / 'lock'}",
        f"--mig-apply-lock={short_dir / 'mig.lock'}",
        "--metrics-bind-address=127.0.0.1:0",
        "--pass-device-specs=true", "--gdrcopy-enabled", "--imex-channel-ids=0,1",
        "--device-id-strategy=index",
    ]  # fmt: skip
    logs = Daemon(cmd, python_env(NODE_NAME=NODE, PYTHONFAULTHANDLER="1"))
    proc = logs.proc
    try:
        req = kubelet.next_registration()
        assert req.resource_name == "nvidia.com/gpu"
        last = logs.wait_for_line("Starting WatchAndRegister")
        lines = list(logs.lines)
        missing = [needle for needle in STARTUP if not any(needle in line for line in lines)]
        assert missing == [], "\n".join(lines)
        positions = [next(i for i, line in enumerate(lines) if needle in line) for needle in STARTUP]
        assert positions == sorted(positions), logs.lines
        assert re.match(r"^I\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ \S+:\d+\] ", last.string)
        metrics_url = logs.wait_for_line(r"Serving metrics on (\S+)").group(1)
        metrics = requests.get(metrics_url, timeout=10).text
        for family in FAMILIES:
            assert f"# TYPE {family}" in metrics, family
        assert f'hami_device_memory_scaling{{node="{NODE}"}} 1.5' in metrics
        assert exposed_families(metrics) == {d.name for d in describe()}  # docs/metrics.md's source
        node = client.CoreV1Api(kube_client).read_node(NODE)
        assert '"count":10' in node.metadata.annotations[ann.NODE_REGISTER]
        proc.send_signal(signal.SIGHUP)
        assert kubelet.next_registration().endpoint == "nvidia-gpu.sock"
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=60) == 0
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack to stderr
            proc.wait(timeout=30)
            raise AssertionError("no exit after SIGTERM:\n" + "\n".join(logs.lines)) from None
    finally:
        logs.stop(grace=0)
        kubelet.stop()


def test_missing_node_name_and_bad_config_fail_fast(short_dir: Path) -> None:
    env = {k: v for k, v in python_env().items() if k != "NODE_NAME"}
    base = [sys.executable, "-m", "hami.deviceplugin", "--nvml=fake", f"--device-plugin-path={short_dir}"]
    out = subprocess.run(base, env=env, check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "NODE_NAME is not set" in out.stderr
    out = subprocess.run(
        [*base, "--node-name=n", f"--config-file={short_dir / 'absent.yaml'}"],
        env=env, check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 1 and "failed to load device config file" in out.stderr


def test_a_server_that_keeps_crashing_ends_the_process_as_hami_does(
    kube_api: KubeAPIServer, kube_client: Any, kube_config_file: Path, short_dir: Path
) -> None:
    client.CoreV1Api(kube_client).create_node({"metadata": {"name": NODE}})
    spec = short_dir / "nvml.yaml"
    spec.write_text(yaml.safe_dump(NVML_SPEC), encoding="utf-8")
    kubelet = FakeKubelet(short_dir)
    kubelet.start()
    cmd = [
        sys.executable, "-m", "hami.deviceplugin",
        f"--kubeconfig={kube_config_file}", "--nvml=fake", f"--fake-nvml-spec={spec}",
        f"--device-plugin-path={short_dir}", "--node-config-file=",
        f"--hook-path={short_dir / 'hook'}", f"--mig-apply-lock={short_dir / 'mig.lock'}",
        "--metrics-bind-address=127.0.0.1:0",
        "--grpc-probe-interval=0.05", "--grpc-restart-backoff=0.01",
    ]  # fmt: skip
    logs = Daemon(cmd, python_env(NODE_NAME=NODE))
    socket = short_dir / "nvidia-gpu.sock"
    try:
        kubelet.next_registration()
        for n in range(1, 8):
            wait_until(socket.is_socket, what=f"the socket before kill {n}")
            socket.unlink()
            if n < 7:
                kubelet.next_registration()  # served again and registered again
        assert logs.proc.wait(timeout=60) == 255
        last = logs.wait_for_line("has repeatedly crashed recently").string
        crashed = [line for line in logs.lines if "crashed with error" in line]
        assert len(crashed) == 7 and all(f"socket {socket} is gone" in line for line in crashed)
        assert last.startswith("F") and last.endswith(
            "GRPC server for 'nvidia.com/gpu' has repeatedly crashed recently. Quitting"
        )
    finally:
        logs.stop(grace=0)
        kubelet.stop()


def test_profiling_flags(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["--profiling"])
    assert (args.profiling, args.profiling_heap_from_start) == (True, False)
    args = build_parser().parse_args(["--profiling", "--profiling.heap-from-start"])
    assert (args.profiling, args.profiling_heap_from_start) == (True, True)
    # Tracing that no endpoint could read is refused before the plugin starts anything.
    with pytest.raises(SystemExit) as exited:
        main(["--profiling.heap-from-start"])
    assert exited.value.code == 2
    assert "--profiling.heap-from-start needs --profiling" in capsys.readouterr().err
