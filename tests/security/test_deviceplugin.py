"""The device plugin gives a container only this node's GPUs and sane limits, whatever the pod's
annotations say (anyone who may patch the pod writes them)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml

from hami.core.codec.pod_devices import encode_pod_devices
from hami.core.devices import ContainerDevice
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.testing import cluster
from hami.testing.builders import allocating_pod, res
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.kubelet import Kubelet
from hami.testing.processes import log_tail
from hami.testing.wait import wait_until

NODE = "gpu-1"
HERE = cluster.gpu_uuid(0, 0)
ELSEWHERE = cluster.gpu_uuid(7, 0)  # a GPU of another node


@pytest.fixture
def kubelet(kube_api: KubeAPIServer, kube_config_file: Path) -> Iterator[Kubelet]:
    """The real device plugin (a child process on a fake NVML) registered with a kubelet stand-in."""
    directory = Path(tempfile.mkdtemp(prefix="dp", dir="/tmp"))  # unix socket paths stay short
    kube_api.store.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    spec = directory / "nvml.yaml"
    spec.write_text(yaml.safe_dump(cluster.fake_nvml_spec(1)), encoding="utf-8")
    stand_in = Kubelet(directory, kube_api.url, NODE)
    stand_in.start()
    log = directory / "plugin.log"
    with log.open("wb") as out:
        plugin = subprocess.Popen(
            [sys.executable, "-m", "hami.deviceplugin", "--node-name", NODE, "--nvml", "fake",
             "--fake-nvml-spec", str(spec), "--device-plugin-path", str(directory),
             "--node-config-file", "", "--hook-path", str(directory / "hook"),
             "--vgpu-lock-dir", str(directory / "lock"), "--metrics-bind-address", "127.0.0.1:0",
             "--kubeconfig", str(kube_config_file)],
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        def registered() -> bool:
            assert plugin.poll() is None, log_tail(log)
            stand_in.tick()
            return stand_in.connected is not None
        wait_until(registered, 30, "the device plugin's registration")
        yield stand_in
    finally:
        stand_in.stop()
        plugin.terminate()
        try:
            assert plugin.wait(30) == 0, log_tail(log)  # SIGTERM stops it, whenever it comes
        finally:
            if plugin.poll() is None:
                plugin.kill()
                plugin.wait(10)
            shutil.rmtree(directory, ignore_errors=True)


def pending_pod(kube_api: KubeAPIServer, name: str, device: ContainerDevice) -> None:
    kube_api.store.put(allocating_pod(name, NODE, encode_pod_devices([[device]]), res(1)))


def allocate(kubelet: Kubelet) -> pb.AllocateResponse:
    assert kubelet.connected is not None
    one = pb.ContainerAllocateRequest(devices_ids=kubelet.device_ids[:1])
    answer: pb.AllocateResponse = kubelet.connected[2].Allocate(
        pb.AllocateRequest(container_requests=[one]), timeout=10
    )
    return answer


@pytest.mark.parametrize(("device", "message"), [
    (ContainerDevice(ELSEWHERE, "NVIDIA", 1000, 30), "is not on this node"),
    (ContainerDevice(HERE, "NVIDIA", -1000, 30), "are not valid limits"),
    (ContainerDevice(HERE, "NVIDIA", 1000, -50), "are not valid limits"),
])
def test_allocate_refuses_a_foreign_gpu_or_a_negative_limit(
    kube_api: KubeAPIServer, kubelet: Kubelet, device: ContainerDevice, message: str
) -> None:
    pending_pod(kube_api, "p", device)
    with pytest.raises(grpc.RpcError) as refused:
        allocate(kubelet)
    assert message in (refused.value.details() or "")
    pending_pod(kube_api, "q", ContainerDevice(HERE, "NVIDIA", 1000, 30))  # a sane one still works
    envs = allocate(kubelet).container_responses[0].envs
    assert envs["NVIDIA_VISIBLE_DEVICES"] == HERE and envs["CUDA_DEVICE_SM_LIMIT"] == "30"
