"""The device plugin's log at -v=4 (annotation and metric details, what Allocate hands a container)
and -v=5 (every device and how a kubelet device ID maps to a GPU UUID), line by line."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from hami.core import annotations as ann
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.kubelet import FakeKubelet
from hami.testing.pluginrig import NODE, NVML_SPEC, U0, U1
from hami.testing.processes import Daemon, python_env

KLOG = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ [\w.]+:\d+\] (.*)$")
TO_ALLOCATE = f"{U1},NVIDIA,3000,30:;"


def _run(level: int, api: KubeAPIServer, kube: Any, kubeconfig: Path, directory: Path) -> list[str]:
    """The plugin at ``-v=level``: registered, one ListAndWatch, one Allocate; its log messages."""
    core = client.CoreV1Api(kube)
    core.create_node({"metadata": {"name": NODE}})
    spec = directory / "nvml.yaml"
    spec.write_text(yaml.safe_dump(NVML_SPEC), encoding="utf-8")
    (directory / "config.yaml").write_text("nvidia:\n  deviceSplitCount: 10\n", encoding="utf-8")
    kubelet = FakeKubelet(directory)
    kubelet.start()
    daemon = Daemon(
        [
            sys.executable, "-m", "hami.deviceplugin",
            f"--kubeconfig={kubeconfig}", "--nvml=fake", f"--fake-nvml-spec={spec}",
            f"--device-plugin-path={directory}", f"--config-file={directory / 'config.yaml'}",
            "--node-config-file=", f"--hook-path={directory / 'hook'}",
            f"--vgpu-lock-dir={directory / 'lock'}", f"--mig-apply-lock={directory / 'mig.lock'}",
            "--metrics-bind-address=127.0.0.1:0", f"-v={level}",
        ],
        python_env(NODE_NAME=NODE),
    )  # fmt: skip
    try:
        kubelet.next_registration()
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {
                    "name": "p1",
                    "annotations": {
                        ann.POD_VGPU_NODE: NODE,
                        ann.POD_BIND_TIME: "1755757239",
                        ann.POD_BIND_PHASE: ann.BIND_PHASE_ALLOCATING,
                        ann.POD_DEVICES_TO_ALLOCATE: TO_ALLOCATE,
                        ann.POD_DEVICES_ALLOCATED: TO_ALLOCATE,
                    },
                },
                "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "cuda"}]},
            },
        )
        # locked for p1 as the scheduler leaves it: Allocate reads the pod even before its informer has it
        lock = {ann.NODE_LOCK: "2026-08-21T06:20:39Z,default,p1"}
        core.patch_node(NODE, {"metadata": {"annotations": lock}})
        channel, stub = kubelet.plugin("nvidia-gpu.sock")
        with channel:
            assert len(next(stub.ListAndWatch(pb.Empty())).devices) == 20
            request = pb.ContainerAllocateRequest(devices_ids=[f"{U1}-7"])
            stub.Allocate(pb.AllocateRequest(container_requests=[request]))
    finally:
        assert daemon.stop() == 0, daemon.log()
        kubelet.stop()
    return [m.group(2) for m in map(KLOG.match, daemon.lines) if m]


@pytest.mark.parametrize("level", [4, 5])
def test_v4_details_and_v5_devices(
    level: int, kube_api: KubeAPIServer, kube_client: Any, kube_config_file: Path, short_dir: Path
) -> None:
    messages = _run(level, kube_api, kube_client, kube_config_file, short_dir)
    v4 = [
        f"node {NODE} annotation {ann.NODE_REGISTER}=[{{\"id\":\"{U0}\",\"count\":10,",
        "device metrics updated: 2 device(s), 2 healthy",
        "ListAndWatch: sending 20 device(s) of 'nvidia.com/gpu'",
        f"Allocate for pod default/p1: {ann.POD_DEVICES_TO_ALLOCATE}={TO_ALLOCATE}",
        "Allocate for pod default/p1 container main: CUDA_DEVICE_MEMORY_LIMIT_0=3000m "
        "CUDA_DEVICE_MEMORY_SHARED_CACHE=",
        f"Allocate for pod default/p1: {ann.POD_DEVICES_TO_ALLOCATE}=;, {ann.POD_BIND_PHASE}=success",
    ]
    missing = [line for line in v4 if not any(m.startswith(line) for m in messages)]
    assert missing == [], "\n".join(messages)
    allocated = next(m for m in messages if m.startswith("Allocate for pod default/p1 container main"))
    assert f"NVIDIA_VISIBLE_DEVICES={U1}; mounts " in allocated and ":/etc/ld.so.preload" in allocated
    v5 = [
        f"nvml device 0: uuid {U0}, name Tesla V100-PCIE-32GB, memory 32768 MiB, numa 0, /dev/nvidia0",
        f"nvml device 1: uuid {U1}, name NVIDIA A100-SXM4-40GB, memory 40960 MiB, numa 1, /dev/nvidia1",
        f"ListAndWatch: device {U0}-9 Healthy",
        f"Allocate for pod default/p1: kubelet device {U1}-7 is replica of GPU {U1}; the scheduler chose "
        f"GPU {U1} (3000 MiB, 30% cores)",
    ]
    present = [line for line in v5 if line in messages]
    assert present == (v5 if level >= 5 else []), "\n".join(messages)


def test_default_verbosity_has_no_detail(
    kube_api: KubeAPIServer, kube_client: Any, kube_config_file: Path, short_dir: Path
) -> None:
    messages = _run(0, kube_api, kube_client, kube_config_file, short_dir)
    assert "Successfully registered annotation. Next check in 30s seconds..." in messages
    detail = (f"node {NODE} annotation", "device metrics", "ListAndWatch:", "Allocate for pod", "nvml device")
    assert [m for m in messages if m.startswith(detail)] == []
