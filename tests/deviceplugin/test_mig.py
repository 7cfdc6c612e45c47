"""Dynamic MIG: profiles registered, instances created at the scheduler's placement by Allocate,
recorded in hami.io/vgpu-mig-allocations, destroyed when the pod is gone (also across a restart),
and every bad input refused with nothing left behind."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client

from hami.core import annotations as ann
from hami.core.codec.mig import decode_mig_allocations, encode_mig_allocations
from hami.core.codec.node_devices import decode_node_devices
from hami.core.devices import ContainerDevice, MigAllocation, MigPlacement
from hami.core.nvml import GpuInstanceInfo, GpuInstanceProfile
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.migplan import (
    MIG_ALLOCATION_MISSING,
    MIG_PLACEMENT_INVALID,
    MIG_PROFILE_NOT_ALLOWED,
    MigPlanError,
    mig_profiles,
    orphans,
    plan,
)
from hami.exporter.attribution import mig_devices
from hami.testing.builders import allocating_pod
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.pluginrig import NODE, Rig, start_rig
from hami.testing.wait import wait_until
from tests.deviceplugin.gpuboards import board_uuid, mig_board

GPU = board_uuid("mig", 0)
PROFILES = [
    GpuInstanceProfile(19, "1g.5gb", 1, 4864, 7, tuple((s, 1) for s in range(7))),
    GpuInstanceProfile(0, "7g.40gb", 7, 40192, 1, ((0, 8),)),
]
MIG_CFG = PluginConfig(operating_mode="mig", mig_profile_allowlist=((("A100",), ("1g.5gb", "3g.20gb")),))


def test_registered_profiles_follow_the_allowlist() -> None:
    got = mig_profiles(PROFILES, frozenset({"1g.5gb"}))
    assert [(p.name, p.core, p.memory_mb, len(p.placements)) for p in got] == [("1g.5gb", 15, 4864, 7)]
    assert [p.core for p in mig_profiles(PROFILES, None)] == [15, 100]
    assert MIG_CFG.allowed_mig_profiles("NVIDIA A100-SXM4-40GB") == {"1g.5gb", "3g.20gb"}
    assert MIG_CFG.allowed_mig_profiles("NVIDIA H100 80GB HBM3") == frozenset()


def _alloc(profile: str, start: int, size: int, device: int = 0) -> MigAllocation:
    return MigAllocation(0, device, GPU, profile, MigPlacement(start, size))


@pytest.mark.parametrize(
    ("allocations", "allowed", "reason", "message"),
    [
        ([], None, MIG_ALLOCATION_MISSING, "no MIG placement for container 0 device 0"),
        ([_alloc("7g.40gb", 0, 8)], frozenset({"1g.5gb"}), MIG_PROFILE_NOT_ALLOWED, "7g.40gb is not offered"),
        ([_alloc("2g.10gb", 0, 2)], None, MIG_PROFILE_NOT_ALLOWED, "2g.10gb is not offered"),
        ([_alloc("1g.5gb", 5, 2)], None, MIG_PLACEMENT_INVALID, "start=5 size=2 is not one of profile"),
    ],
)
def test_plans_refuse_what_the_card_cannot_hold(
    allocations: list[MigAllocation], allowed: frozenset[str] | None, reason: str, message: str
) -> None:
    with pytest.raises(MigPlanError) as info:
        plan(allocations, 0, (ContainerDevice(GPU, "NVIDIA", 4864, 0),), {GPU: PROFILES}, {GPU: allowed})
    assert info.value.reason == reason and message in info.value.message


def test_orphans_are_the_instances_no_pod_holds() -> None:
    a, b = GpuInstanceInfo(1, 19, 0, 1, (0,)), GpuInstanceInfo(2, 19, 1, 1, (0,))
    assert orphans({GPU: [a, b]}, {(GPU, 2)}) == [(GPU, a)]


# ---- end to end ----


def _rig(api: KubeAPIServer, kube: Any, directory: Path, spec: dict[str, Any] | None = None) -> Rig:
    return start_rig(api, kube, directory, MIG_CFG, spec or mig_board())


def _pod(rig: Rig, name: str, allocations: list[MigAllocation]) -> None:
    body = allocating_pod(name, NODE, f"{GPU},NVIDIA,4864,0:;", {"name": "main", "image": "cuda"})
    body["metadata"]["annotations"][ann.POD_MIG_ALLOCATIONS] = encode_mig_allocations(allocations)
    core = client.CoreV1Api(rig.kube_client)
    core.create_namespaced_pod("default", body)
    lock = {ann.NODE_LOCK: f"2026-08-21T06:20:39Z,default,{name}"}
    core.patch_node(NODE, {"metadata": {"annotations": lock}})
    wait_until(lambda: rig.pods.get(f"default/{name}"), what="pod in the informer")


def _allocate(rig: Rig) -> pb.ContainerAllocateResponse:
    channel, stub = rig.kubelet.plugin("nvidia-gpu.sock")
    with channel:
        ctr = pb.ContainerAllocateRequest(devices_ids=[f"{GPU}-0"])
        (resp,) = stub.Allocate(pb.AllocateRequest(container_requests=[ctr])).container_responses
    return resp


def _instances(rig: Rig) -> list[tuple[int, int, int]]:
    return [(g.profile_id, g.start, g.size) for g in rig.nvml.device(0).gpu_instances()]


def test_allocate_creates_the_instance_records_it_and_the_pods_end_destroys_it(
    kube_api: KubeAPIServer, kube_client: Any, short_dir: Path
) -> None:
    rig = _rig(kube_api, kube_client, short_dir)
    try:
        (dev,) = decode_node_devices(rig.node_annotations()[ann.NODE_REGISTER])
        assert (dev.mode, dev.count, [p.name for p in dev.mig_profiles]) == ("mig", 7, ["1g.5gb", "3g.20gb"])
        _pod(rig, "p1", [_alloc("1g.5gb", 3, 1)])
        resp = _allocate(rig)
        (mig,) = rig.nvml.device(0).mig_devices()
        assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == mig.uuid and mig.uuid.startswith("MIG-")
        assert "CUDA_DEVICE_MEMORY_LIMIT_0" not in resp.envs  # MIG isolates in hardware: no HAMi-core
        assert _instances(rig) == [(19, 3, 1)]
        pod = client.CoreV1Api(kube_client).read_namespaced_pod("p1", "default").to_dict()
        (recorded,) = decode_mig_allocations(pod["metadata"]["annotations"][ann.POD_MIG_ALLOCATIONS])
        assert (recorded.mig_uuid, recorded.gpu_instance_id, recorded.compute_instance_id) == (
            mig.uuid, mig.gpu_instance_id, mig.compute_instance_id
        )
        assert pod["metadata"]["annotations"][ann.POD_BIND_PHASE] == "success"
        # what the monitor's hami_mig_device_info reads
        meta = {"name": "p1", "namespace": "default", "annotations": pod["metadata"]["annotations"]}
        spec = {"containers": [{"name": "main"}]}
        running = {"metadata": meta, "spec": spec, "status": {"phase": "Running"}}
        (view,) = mig_devices([running], decode_mig_allocations)
        assert (view.container, view.mig_uuid, view.profile) == ("main", mig.uuid, "1g.5gb")
        assert not rig.plugin.settings.mig_apply_lock.exists()  # the lock is released
        client.CoreV1Api(kube_client).delete_namespaced_pod("p1", "default")
        wait_until(lambda: _instances(rig) == [], what="the instance destroyed after its pod")
        assert rig.nvml.device(0).mig_devices() == []
    finally:
        rig.stop()


@pytest.mark.parametrize(
    ("allocations", "fail", "reason", "message"),
    [
        ([_alloc("1g.5gb", 2, 3)], None, MIG_PLACEMENT_INVALID, "start=2 size=3 is not one of profile"),
        ([_alloc("7g.40gb", 0, 8)], None, MIG_PROFILE_NOT_ALLOWED, "MIG profile 7g.40gb is not offered"),
        ([_alloc("1g.5gb", 0, 1)], "nvmlGpuInstanceCreateComputeInstance", "mig_create_failed",
         "failed to create MIG instance 1g.5gb at start=0 size=1"),
        ([_alloc("1g.5gb", 0, 1)], "lock", "mig_lock_held", "the MIG apply lock"),
    ],
)  # fmt: skip
def test_bad_input_is_a_clear_error_a_counted_reason_and_nothing_made(  # noqa: PLR0917
    allocations: list[MigAllocation],
    fail: str | None,
    reason: str,
    message: str,
    kube_api: KubeAPIServer,
    kube_client: Any,
    short_dir: Path,
) -> None:
    rig = _rig(kube_api, kube_client, short_dir)
    lock = rig.plugin.settings.mig_apply_lock
    try:
        if fail == "lock":
            lock.write_text("", encoding="utf-8")  # someone else is repartitioning
        elif fail is not None:
            rig.nvml.fail(fail, code="INSUFFICIENT_RESOURCES", times=1)
        _pod(rig, "bad", allocations)
        with pytest.raises(grpc.RpcError) as info:
            _allocate(rig)
        assert message in (info.value.details() or "")
        assert rig.metric("hami_deviceplugin_allocate_errors_total", reason=reason) == 1
        assert _instances(rig) == [] and rig.nvml.device(0).mig_devices() == []
        assert lock.exists() == (fail == "lock")  # never left by the plugin, never taken from another
    finally:
        lock.unlink(missing_ok=True)
        rig.stop()


def test_after_a_restart_leftovers_of_gone_pods_are_destroyed_and_held_ones_kept(
    kube_api: KubeAPIServer, kube_client: Any, short_dir: Path
) -> None:
    spec = copy.deepcopy(mig_board())
    spec["devices"][0]["mig"]["instances"] = [
        {"uuid": "MIG-held", "profile": "1g.5gb", "gpu_instance_id": 1, "placement": [0, 1]},
        {"uuid": "MIG-left", "profile": "1g.5gb", "gpu_instance_id": 2, "placement": [1, 1]},
    ]
    holder = allocating_pod("holder", NODE, ";", {"name": "main", "image": "cuda"})
    owned = MigAllocation(0, 0, GPU, "1g.5gb", MigPlacement(0, 1), "MIG-held", 1, 0)
    holder["metadata"]["annotations"][ann.POD_MIG_ALLOCATIONS] = encode_mig_allocations([owned])
    holder["metadata"]["annotations"][ann.POD_BIND_PHASE] = "success"
    client.CoreV1Api(kube_client).create_namespaced_pod("default", holder)
    rig = _rig(kube_api, kube_client, short_dir, spec)
    try:
        wait_until(lambda: _instances(rig) == [(19, 0, 1)], what="the leftover destroyed")
        assert [m.uuid for m in rig.nvml.device(0).mig_devices()] == ["MIG-held"]
    finally:
        rig.stop()
