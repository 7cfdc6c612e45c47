"""Allocate end to end: the kubelet's gRPC call, the pending pod in the API emulator, every failure path."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client

from hami.core import annotations as ann
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.deviceplugin.config import PluginConfig
from hami.testing.builders import allocating_pod
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.pluginrig import NODE, U0, U1, Rig, start_rig
from hami.testing.wait import wait_until

LOCK_TIME = "2026-08-21T06:20:39Z"


def make_pod(
    rig: Rig,
    name: str,
    to_allocate: str | None,
    *,
    containers: tuple[str, ...] = ("main",),
    lock: bool = True,
    init: tuple[str, ...] = (),
) -> None:
    body = allocating_pod(
        name, NODE, to_allocate, *({"name": c, "image": "cuda"} for c in containers),
        init=[{"name": c, "image": "x"} for c in init],
    )
    core = client.CoreV1Api(rig.kube_client)
    core.create_namespaced_pod("default", body)
    if lock:
        core.patch_node(NODE, {"metadata": {"annotations": {ann.NODE_LOCK: f"{LOCK_TIME},default,{name}"}}})
    wait_until(lambda: rig.pods.get(f"default/{name}"), what="pod in the informer")


def allocate(rig: Rig, *requests: list[str]) -> pb.AllocateResponse:
    channel, stub = rig.kubelet.plugin("nvidia-gpu.sock")
    with channel:
        return stub.Allocate(
            pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=r) for r in requests]
            )
        )


def pod_annotations(rig: Rig, name: str) -> dict[str, str]:
    pod = client.CoreV1Api(rig.kube_client).read_namespaced_pod(name, "default")
    return dict(pod.metadata.annotations or {})


def test_allocate_one_container(rig: Rig) -> None:
    make_pod(rig, "p1", f"{U1},NVIDIA,3000,30:;")
    resp = allocate(rig, [f"{U1}-2"])
    (ctr,) = resp.container_responses
    hook = rig.dir / "hook"
    envs = dict(ctr.envs)
    cache = envs.pop("CUDA_DEVICE_MEMORY_SHARED_CACHE")
    assert cache.startswith(f"{hook}/vgpu/") and cache.endswith(".cache")
    assert envs == {
        "NVIDIA_VISIBLE_DEVICES": U1,
        "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
        "CUDA_DEVICE_SM_LIMIT": "30",
    }
    uid = client.CoreV1Api(rig.kube_client).read_namespaced_pod("p1", "default").metadata.uid
    cache_dir = hook / "vgpu" / "containers" / f"{uid}_main"
    assert [(m.container_path, m.host_path, m.read_only) for m in ctr.mounts] == [
        (f"{hook}/vgpu/libvgpu.so", f"{hook}/vgpu/libvgpu.so", True),
        (f"{hook}/vgpu", str(cache_dir), False),
        ("/tmp/vgpulock", str(rig.dir / "vgpulock"), False),
        ("/etc/ld.so.preload", f"{hook}/vgpu/ld.so.preload", True),
    ]
    assert stat.S_IMODE(os.stat(cache_dir).st_mode) == 0o777
    annos = pod_annotations(rig, "p1")
    assert annos[ann.POD_DEVICES_TO_ALLOCATE] == ";"
    assert annos[ann.POD_BIND_PHASE] == ann.BIND_PHASE_SUCCESS
    # The label HAMi's vGPU monitor lists pods by: the scheduler's Binding cannot set it.
    labels = client.CoreV1Api(rig.kube_client).read_namespaced_pod("p1", "default").metadata.labels
    assert labels[ann.POD_VGPU_NODE] == annos[ann.POD_VGPU_NODE]
    assert ann.NODE_LOCK not in rig.node_annotations()
    assert rig.metric("hami_deviceplugin_allocate_duration_seconds_count", result="success") == 1


def test_containers_are_allocated_in_order_and_the_lock_released_last(rig: Rig) -> None:
    make_pod(
        rig,
        "p2",
        f";{U0},NVIDIA,1000,0:{U1},NVIDIA,2000,50:;{U0},NVIDIA,500,10:;",
        containers=("a", "b"),
        init=("i",),
    )
    first = allocate(rig, [f"{U0}-0", f"{U1}-0"]).container_responses[0]
    assert first.envs["NVIDIA_VISIBLE_DEVICES"] == f"{U0},{U1}"
    assert first.envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "2000m"
    assert first.envs["CUDA_DEVICE_SM_LIMIT"] == "0"  # the first device's cores only
    annos = pod_annotations(rig, "p2")
    assert annos[ann.POD_DEVICES_TO_ALLOCATE] == f";;{U0},NVIDIA,500,10:;"
    assert annos[ann.POD_BIND_PHASE] == ann.BIND_PHASE_ALLOCATING
    assert ann.NODE_LOCK in rig.node_annotations()
    # No wait for the informer: the next call must see the erased annotation at once.
    second = allocate(rig, [f"{U0}-3"]).container_responses[0]
    assert second.mounts[1].host_path.endswith("_b")
    assert pod_annotations(rig, "p2")[ann.POD_BIND_PHASE] == ann.BIND_PHASE_SUCCESS
    assert ann.NODE_LOCK not in rig.node_annotations()


def test_pending_pod_found_without_a_lock_from_the_informer(rig: Rig) -> None:
    make_pod(rig, "p3", f"{U0},NVIDIA,100,0:;", lock=False)
    gets_before = rig.kube_api.requests.count("GET", "/api/v1/namespaces/default/pods/p3$")
    allocate(rig, [f"{U0}-1"])
    assert pod_annotations(rig, "p3")[ann.POD_BIND_PHASE] == ann.BIND_PHASE_SUCCESS
    assert rig.kube_api.requests.count("GET", "/api/v1/namespaces/default/pods/p3$") == gets_before + 1


def _fails(rig: Rig, *requests: list[str]) -> str:
    with pytest.raises(grpc.RpcError) as err:
        allocate(rig, *requests)
    return str(err.value.details())


def test_no_pending_pod(rig: Rig) -> None:
    assert _fails(rig, [f"{U0}-0"]) == f"failed to get pending pod: no binding pod found on node {NODE}"
    assert rig.metric("hami_deviceplugin_allocate_errors_total", reason="pending_pod_not_found") == 1
    assert rig.metric("hami_deviceplugin_allocate_duration_seconds_count", result="failure") == 1


@pytest.mark.parametrize(
    ("to_allocate", "ids", "reason", "message"),
    [
        (
            f"{U0},NVIDIA,1000,0:;",
            [f"{U0}-0", f"{U0}-1"],
            "device_number_mismatch",
            "device number not matched",
        ),
        (
            f"{U0},NVIDIA,1000,0:;",
            ["GPU-nope-0"],
            "unknown_device",
            "invalid allocation request for 'nvidia.com/gpu': unknown device: GPU-nope-0",
        ),
        (f"{U0},NVIDIA,abc,0:;", [f"{U0}-0"], "decode_failed", "failed to decode pod devices: "),
        (f"{U0},NVIDIA:;", [f"{U0}-0"], "decode_failed", "failed to decode pod devices: "),
        (None, [f"{U0}-0"], "decode_failed", "failed to decode pod devices: device request not found"),
    ],
)
def test_failures_mark_the_pod_failed_and_release_the_lock(
    rig: Rig, to_allocate: str | None, ids: list[str], reason: str, message: str
) -> None:
    make_pod(rig, "bad", to_allocate)
    assert _fails(rig, ids).startswith(message)
    assert rig.metric("hami_deviceplugin_allocate_errors_total", reason=reason) == 1
    assert pod_annotations(rig, "bad")[ann.POD_BIND_PHASE] == ann.BIND_PHASE_FAILED
    assert ann.NODE_LOCK not in rig.node_annotations()


def test_a_lock_owned_by_another_pod_is_kept(rig: Rig) -> None:
    make_pod(rig, "mine", f"{U0},NVIDIA,1000,0:;", lock=False)
    client.CoreV1Api(rig.kube_client).patch_node(
        NODE, {"metadata": {"annotations": {ann.NODE_LOCK: f"{LOCK_TIME},other,theirs"}}}
    )
    with pytest.raises(grpc.RpcError):
        allocate(rig, ["GPU-nope-0"])  # the lock owner is not on this node: the informer path finds "mine"
    assert pod_annotations(rig, "mine")[ann.POD_BIND_PHASE] == ann.BIND_PHASE_FAILED
    assert rig.node_annotations()[ann.NODE_LOCK] == f"{LOCK_TIME},other,theirs"


def test_a_refused_pod_patch_is_counted(rig: Rig) -> None:
    make_pod(rig, "p4", f"{U0},NVIDIA,1000,0:;")
    rig.kube_api.faults.add(method="PATCH", path="/pods/p4$", status=500, times=1)
    assert _fails(rig, [f"{U0}-0"]).startswith("failed to update pod annotation")
    assert rig.metric("hami_deviceplugin_allocate_errors_total", reason="pod_update_failed") == 1


@pytest.fixture
def slicing_rig(kube_api: KubeAPIServer, kube_client: Any, short_dir: Path) -> Iterator[Rig]:
    cfg = PluginConfig(device_split_count=2, fail_requests_greater_than_one=True)
    r = start_rig(kube_api, kube_client, short_dir, cfg)
    yield r
    r.manager.stop()
    r.kubelet.stop()
    r.pods.stop()


def test_multi_replica_mig_request_is_too_large(slicing_rig: Rig) -> None:
    make_pod(slicing_rig, "mig", f"{U0},NVIDIA,1000,0:;")
    details = _fails(slicing_rig, ["MIG-0a1b::0", "MIG-0a1b::1"])
    assert (
        details == "request for 'nvidia.com/gpu: 2' too large: maximum request size for shared resources is 1"
    )
    assert slicing_rig.metric("hami_deviceplugin_allocate_errors_total", reason="request_too_large") == 1


def test_preferred_allocation_follows_the_scheduler(rig: Rig) -> None:
    make_pod(rig, "pref", f"{U1},NVIDIA,1000,0:;")
    channel, stub = rig.kubelet.plugin("nvidia-gpu.sock")
    with channel:
        resp = stub.GetPreferredAllocation(
            pb.PreferredAllocationRequest(
                container_requests=[
                    pb.ContainerPreferredAllocationRequest(
                        available_deviceIDs=[f"{U0}-0", f"{U1}-0", f"{U1}-1"], allocation_size=1
                    )
                ]
            )
        )
    assert [list(r.deviceIDs) for r in resp.container_responses] == [[f"{U1}-0"]]


def test_an_unpreparable_cache_dir_is_counted(rig: Rig) -> None:
    containers = rig.dir / "hook" / "vgpu" / "containers"
    containers.parent.mkdir(parents=True)
    containers.write_text("not a directory", encoding="utf-8")
    make_pod(rig, "p5", f"{U0},NVIDIA,1000,0:;")
    assert _fails(rig, [f"{U0}-0"]).startswith("failed to get allocate response: ")
    assert rig.metric("hami_deviceplugin_allocate_errors_total", reason="host_prepare_failed") == 1
    assert pod_annotations(rig, "p5")[ann.POD_BIND_PHASE] == ann.BIND_PHASE_FAILED
