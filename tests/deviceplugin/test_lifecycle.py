"""Registration, ListAndWatch, health and kubelet restarts, end to end on FakeNvml and the API emulator.

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kubernetes import client

from hami.core import annotations as ann
from hami.core.codec.node_devices import decode_node_devices
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.deviceplugin.config import PluginConfig, load_config
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.pluginrig import NODE, U0, U1, Rig, start_rig
from hami.testing.wait import wait_until


def _registered(rig: Rig) -> dict[str, Any]:
    text = wait_until(lambda: rig.node_annotations().get(ann.NODE_REGISTER), what="register annotation")
    return {d.id: d for d in decode_node_devices(text)}


def test_startup_registers_with_kubelet_and_annotates_the_node(rig: Rig) -> None:
    req = rig.kubelet.next_registration()
    assert (req.version, req.endpoint, req.resource_name) == ("v1beta1", "nvidia-gpu.sock", "nvidia.com/gpu")
    devs = _registered(rig)
    assert devs[U0].type == "NVIDIA-Tesla V100-PCIE-32GB"  # prefixed: the model lacks "NVIDIA"
    assert devs[U1].type == "NVIDIA A100-SXM4-40GB"  # kept as is
    assert [(d.index, d.count, d.devmem, d.devcore, d.numa, d.mode, d.health) for d in devs.values()] == [
        (0, 4, 32768, 100, 0, "hami-core", True),
        (1, 4, 40960, 100, 1, "hami-core", True),
    ]
    assert rig.metric("hami_deviceplugin_register_total", result="success") == 1
    assert rig.metric("hami_deviceplugin_kubelet_registered", resource="nvidia.com/gpu") == 1
    assert rig.metric("hami_deviceplugin_register_last_success_timestamp_seconds") > 0
    assert rig.metric("hami_device_split_limit") == 4
    assert rig.metric("hami_device_memory_scaling") == 1.0
    assert (
        rig.metric(
            "hami_device_health", device_uuid=U1, device_index="1", device_type="NVIDIA A100-SXM4-40GB"
        )
        == 1
    )


def test_an_unchanged_annotation_is_not_patched_again(rig: Rig) -> None:
    _registered(rig)
    wait_until(lambda: rig.metric("hami_deviceplugin_register_total", result="unchanged") >= 3, what="passes")
    assert rig.kube_api.requests.count("PATCH", f"/api/v1/nodes/{NODE}$") == 1


def test_list_and_watch_and_xid_health(rig: Rig) -> None:
    channel, stub = rig.kubelet.plugin("nvidia-gpu.sock")
    with channel:
        stream = stub.ListAndWatch(pb.Empty())
        first = next(stream)
        assert [d.ID for d in first.devices] == [f"{U0}-{i}" for i in range(4)] + [
            f"{U1}-{i}" for i in range(4)
        ]
        assert {d.health for d in first.devices} == {"Healthy"}
        rig.nvml.inject_xid(0, 43)  # an application error: ignored
        wait_until(
            lambda: rig.metric("hami_deviceplugin_health_events_total", device_uuid=U0, event="xid_ignored")
        )
        rig.nvml.inject_xid(1, 79)  # fallen off the bus
        second = next(stream)
        health = {d.ID: d.health for d in second.devices}
        assert health[f"{U1}-3"] == "Unhealthy" and health[f"{U0}-0"] == "Healthy"
        stream.cancel()
    wait_until(lambda: not _registered(rig)[U1].health, what="health:false in the annotation")
    assert _registered(rig)[U0].health
    assert rig.metric("hami_deviceplugin_health_events_total", device_uuid=U1, event="xid_critical") == 1
    assert (
        rig.metric(
            "hami_device_health", device_uuid=U1, device_index="1", device_type="NVIDIA A100-SXM4-40GB"
        )
        == 0
    )


def test_a_kubelet_restart_is_survived_and_resets_health(rig: Rig) -> None:
    rig.kubelet.next_registration()
    rig.nvml.inject_xid(0, 48)
    wait_until(lambda: not _registered(rig)[U0].health, what="unhealthy U0")
    rig.kubelet.restart()  # wipes the sockets and serves a new kubelet.sock
    again = rig.kubelet.next_registration()
    assert again.endpoint == "nvidia-gpu.sock"
    wait_until(rig.manager.started.is_set, what="restarted plugin")
    channel, stub = rig.kubelet.plugin("nvidia-gpu.sock")
    with channel:
        devices = next(stub.ListAndWatch(pb.Empty())).devices
    # The restart rebuilt the device state: the only way back from Unhealthy (§C.6).
    assert {d.health for d in devices} == {"Healthy"}
    wait_until(lambda: _registered(rig)[U0].health, what="healthy U0 in the annotation")


def test_a_failed_patch_is_retried(kube_api: KubeAPIServer, kube_client: Any, short_dir: Path) -> None:
    kube_api.faults.add(method="PATCH", path=f"/api/v1/nodes/{NODE}$", status=500, times=2)
    rig = start_rig(kube_api, kube_client, short_dir)
    try:
        _registered(rig)
        assert rig.metric("hami_deviceplugin_register_total", result="failure") == 2
        assert rig.metric("hami_deviceplugin_register_total", result="success") == 1
    finally:
        rig.manager.stop()
        rig.kubelet.stop()
        rig.pods.stop()


def test_mig_apply_lock_pauses_health_and_registration(rig: Rig) -> None:
    _registered(rig)
    lock = rig.plugin.settings.mig_apply_lock
    lock.write_text("", encoding="utf-8")
    before = rig.metric("hami_deviceplugin_register_total", result="unchanged")
    rig.nvml.inject_xid(1, 79)
    time.sleep(0.5)  # several health and register periods pass while paused
    assert rig.metric("hami_deviceplugin_health_events_total", device_uuid=U1, event="xid_critical") == 0
    assert rig.metric("hami_deviceplugin_register_total", result="unchanged") <= before + 1
    lock.unlink()
    wait_until(lambda: not _registered(rig)[U1].health, what="the queued Xid judged after the pause")


def test_filtered_and_wildcard_configured_node(
    kube_api: KubeAPIServer, kube_client: Any, short_dir: Path
) -> None:
    (short_dir / "config.json").write_text(
        '{"nodeconfig":[{"name":"gpu-node-*","devicesplitcount":7,"filterdevices":{"index":[0]}}]}'
    , encoding="utf-8")
    cfg, problem = load_config(PluginConfig(device_split_count=2), NODE, None, short_dir / "config.json")
    assert problem is None
    rig = start_rig(kube_api, kube_client, short_dir, cfg)
    try:
        devs = _registered(rig)
        assert list(devs) == [U1] and devs[U1].count == 7
        channel, stub = rig.kubelet.plugin("nvidia-gpu.sock")
        with channel:
            ids = [d.ID for d in next(stub.ListAndWatch(pb.Empty())).devices]
        assert ids == [f"{U1}-{i}" for i in range(7)]
    finally:
        rig.manager.stop()
        rig.kubelet.stop()
        rig.pods.stop()


def _node_events(rig: Rig) -> list[tuple[str, str, str]]:
    items = client.CoreV1Api(rig.kube_client).list_namespaced_event("default").items
    return [
        (e.type, e.reason, e.message)
        for e in sorted(items, key=lambda e: e.metadata.name)
        if e.involved_object.kind == "Node" and e.involved_object.name == NODE
    ]


def test_an_opted_in_overheat_goes_unhealthy_everywhere_and_comes_back(
    kube_api: KubeAPIServer, kube_client: Any, short_dir: Path
) -> None:
    rig = start_rig(kube_api, kube_client, short_dir, checks=frozenset({"temperature"}))
    try:
        _registered(rig)
        channel, stub = rig.kubelet.plugin("nvidia-gpu.sock")
        with channel:
            stream = stub.ListAndWatch(pb.Empty())
            assert {d.health for d in next(stream).devices} == {"Healthy"}
            rig.nvml.update(1, temperature=93)
            health = {d.ID: d.health for d in next(stream).devices}
            assert health[f"{U1}-0"] == "Unhealthy" and health[f"{U0}-0"] == "Healthy"
            wait_until(lambda: not _registered(rig)[U1].health, what="health:false in the annotation")
            rig.nvml.update(1, temperature=70)
            assert {d.health for d in next(stream).devices} == {"Healthy"}
            stream.cancel()
        wait_until(lambda: _registered(rig)[U1].health, what="health:true again")
        event = {"device_uuid": U1, "event": "temperature_slowdown"}
        assert rig.metric("hami_deviceplugin_health_events_total", **event) == 1
        assert rig.metric("hami_deviceplugin_health_events_total", device_uuid=U1, event="recovered") == 1
        wait_until(lambda: len(_node_events(rig)) == 2, what="two Node events")
        assert _node_events(rig) == [
            (
                "Warning",
                "GPUUnhealthy",
                f"Device {U1} is unhealthy (temperature_slowdown): "
                "temperature 93 C at or above the slowdown threshold 90 C",
            ),
            ("Normal", "GPURecovered", f"Device {U1} recovered from temperature_slowdown; "
             "the device is healthy again"),
        ]
    finally:
        rig.stop()


def test_a_crashed_grpc_server_is_served_again_and_registered_again(rig: Rig) -> None:
    rig.kubelet.next_registration()
    socket = rig.dir / "nvidia-gpu.sock"
    restarts, labels = "hami_deviceplugin_grpc_restarts_total", {"resource": "nvidia.com/gpu"}
    for n in (1, 2):
        socket.unlink()
        assert rig.kubelet.next_registration().endpoint == "nvidia-gpu.sock"  # the kubelet hears of it again
        wait_until(socket.is_socket, what="the socket served again")
        wait_until(lambda n=n: rig.metric(restarts, **labels) == n, what=f"{n} restart(s) counted")
    channel, stub = rig.kubelet.plugin("nvidia-gpu.sock")
    with channel:
        assert len(next(stub.ListAndWatch(pb.Empty())).devices) == 8
