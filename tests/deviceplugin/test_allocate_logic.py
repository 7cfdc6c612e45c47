from __future__ import annotations

import pytest

from hami.core.devices import ContainerDevice
from hami.core.hamicore import HostLayout
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.container_setup import (
    DECODE_FAILED,
    DEVICE_NUMBER_MISMATCH,
    REQUEST_TOO_LARGE,
    UNKNOWN_DEVICE,
    AllocateError,
    DeviceNode,
    GpuRef,
    PreferredRequest,
    RuntimeOptions,
    align_to_kubelet,
    build_container_allocation,
    check_count,
    check_kubelet_ids,
    container_of,
    has_pending_devices,
    pop_next_container,
    preferred_allocation,
)

A = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
B = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"
POD = {
    "spec": {
        "initContainers": [{"name": "init"}],
        "containers": [
            {"name": "main"},
            {"name": "side", "env": [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]},
        ],
    }
}


def test_pop_takes_the_first_non_empty_container_and_erases_it() -> None:
    pd = ((), (ContainerDevice(A, "NVIDIA", 3000, 0),), (ContainerDevice(B, "NVIDIA", 5000, 30),), ())
    idx, devs, rest = pop_next_container(pd)
    assert idx == 1 and devs[0].uuid == A
    assert rest == ((), (), pd[2], ())
    with pytest.raises(AllocateError) as err:
        pop_next_container(((), ()))
    assert err.value.reason == DEVICE_NUMBER_MISMATCH


def test_container_of_maps_init_then_regular() -> None:
    assert container_of(POD, 0)["name"] == "init"
    assert container_of(POD, 2)["name"] == "side"
    with pytest.raises(AllocateError, match=r"container index 3 out of range \(init=1, regular=2\)") as err:
        container_of(POD, 3)
    assert err.value.reason == DECODE_FAILED


def test_count_mismatch_text() -> None:
    with pytest.raises(AllocateError, match=r"^device number not matched$"):
        check_count((ContainerDevice(A, "NVIDIA", 1, 0),), [f"{A}-0", f"{A}-1"])


def test_kubelet_id_checks() -> None:
    cfg = PluginConfig(fail_requests_greater_than_one=True)
    known = frozenset({f"{A}-0"})
    check_kubelet_ids([f"{A}-0"], known, cfg)
    with pytest.raises(AllocateError) as err:
        check_kubelet_ids(["GPU-gone-0"], known, cfg)
    assert err.value.reason == UNKNOWN_DEVICE
    assert str(err.value) == "invalid allocation request for 'nvidia.com/gpu': unknown device: GPU-gone-0"
    with pytest.raises(AllocateError) as err:
        check_kubelet_ids(["MIG-1::0", "MIG-1::1"], known, cfg)
    assert err.value.reason == REQUEST_TOO_LARGE
    assert str(err.value) == (
        "request for 'nvidia.com/gpu: 2' too large: maximum request size for shared resources is 1"
    )


def test_env_and_mounts_per_spec() -> None:
    cfg = PluginConfig(device_memory_scaling=1.5, lib_cuda_log_level="1", disable_core_limit=True)
    layout = HostLayout("/usr/local")
    devreq = (ContainerDevice(A, "NVIDIA", 3000, 30), ContainerDevice(B, "NVIDIA", 5000, 60))
    got = build_container_allocation(
        devreq,
        cfg,
        layout,
        pod_uid="uid-1",
        container=POD["spec"]["containers"][0],
        cache_id="c0ffee",
        lib_host_path="/usr/local/vgpu/libvgpu.so",
        license_present=False,
    )
    assert got.envs == {
        "NVIDIA_VISIBLE_DEVICES": f"{A},{B}",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
        "CUDA_DEVICE_MEMORY_LIMIT_1": "5000m",
        "CUDA_DEVICE_SM_LIMIT": "30",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/c0ffee.cache",
        "CUDA_OVERSUBSCRIBE": "true",
        "LIBCUDA_LOG_LEVEL": "1",
        "GPU_CORE_UTILIZATION_POLICY": "disable",
    }
    assert [(m.container_path, m.host_path, m.read_only) for m in got.mounts] == [
        ("/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu/libvgpu.so", True),
        ("/usr/local/vgpu", "/usr/local/vgpu/containers/uid-1_main", False),
        ("/tmp/vgpulock", "/tmp/vgpulock", False),
        ("/etc/ld.so.preload", "/usr/local/vgpu/ld.so.preload", True),
    ]
    assert got.cache_dir == "/usr/local/vgpu/containers/uid-1_main"


def test_disable_control_license_index_strategy_and_defaults() -> None:
    got = build_container_allocation(
        (ContainerDevice(A, "NVIDIA", 100, 0), ContainerDevice(A, "NVIDIA", 100, 0)),
        PluginConfig(),
        HostLayout("/h"),
        pod_uid="u",
        container=POD["spec"]["containers"][1],
        cache_id="x",
        lib_host_path="/h/vgpu/libvgpu.so.0.1.0",
        license_present=True,
        opts=RuntimeOptions(
            id_strategy="index",
            pass_device_specs=True,
            dev_root="/host",
            gdrcopy=True,
            imex_channel_ids=(0, 1),
        ),
        gpus={A: GpuRef(3, 5)},
    )
    assert got.envs["NVIDIA_VISIBLE_DEVICES"] == "3"
    assert got.envs["NVIDIA_GDRCOPY"] == "enabled" and got.envs["NVIDIA_IMEX_CHANNELS"] == "0,1"
    assert "NVIDIA_GDS" not in got.envs and "NVIDIA_MOFED" not in got.envs
    assert got.devices == (DeviceNode("/dev/nvidia5", "/host/dev/nvidia5", "rw"),)
    assert "CUDA_OVERSUBSCRIBE" not in got.envs and "LIBCUDA_LOG_LEVEL" not in got.envs
    assert "GPU_CORE_UTILIZATION_POLICY" not in got.envs
    paths = [m.container_path for m in got.mounts]
    assert "/etc/ld.so.preload" not in paths
    assert paths[-2:] == ["/tmp/license", "/usr/bin/vgpuvalidator"]


def test_mig_mode_sets_only_visible_devices() -> None:
    got = build_container_allocation(
        (ContainerDevice(A, "NVIDIA", 4864, 15),),
        PluginConfig(operating_mode="mig"),
        HostLayout(),
        pod_uid="u",
        container={"name": "c"},
        cache_id="x",
        lib_host_path="l",
        license_present=False,
    )
    assert got.envs == {"NVIDIA_VISIBLE_DEVICES": A} and got.mounts == () and got.cache_dir is None


def test_pending_keyword() -> None:
    assert has_pending_devices(f";{A},NVIDIA,5000,0:;")
    assert not has_pending_devices(";;")


def test_preferred_allocation_picks_replicas_of_the_scheduled_gpus() -> None:
    pd = ((), (ContainerDevice(A, "NVIDIA", 1, 0), ContainerDevice(B, "NVIDIA", 1, 0)))
    avail = (f"{B}-0", f"{A}-0", f"{A}-1", f"{B}-1")
    got = preferred_allocation(pd, [PreferredRequest(avail, (f"{A}-1",), 2), PreferredRequest(avail, (), 1)])
    assert got == [[f"{A}-1", f"{B}-0"], None]
    assert preferred_allocation(pd, [PreferredRequest((f"{B}-0",), (), 2)]) == [None]


def test_mps_mode_keeps_the_hami_core_env() -> None:
    got = build_container_allocation(
        (ContainerDevice(A, "NVIDIA", 2048, 25),),
        PluginConfig(operating_mode="mps"),
        HostLayout(),
        pod_uid="u",
        container={"name": "c"},
        cache_id="x",
        lib_host_path="l",
        license_present=False,
    )
    assert got.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2048m" and got.envs["CUDA_DEVICE_SM_LIMIT"] == "25"
    assert got.cache_dir == "/usr/local/vgpu/containers/u_c"


def test_preferred_alignment_takes_the_kubelet_gpu() -> None:
    devreq = (ContainerDevice(A, "NVIDIA", 100, 10), ContainerDevice(A, "NVIDIA", 200, 20))
    got = align_to_kubelet(devreq, [f"{B}-3", f"{A}-1"])
    assert [(d.uuid, d.usedmem) for d in got] == [(B, 100), (A, 200)]
