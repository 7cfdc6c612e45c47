"""The checked-in stubs are exactly what scripts/gen_proto.py produces from the proto."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hami.deviceplugin.api import deviceplugin_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "src" / "hami" / "deviceplugin" / "api"
GENERATED = ("deviceplugin_pb2.py", "deviceplugin_pb2.pyi")


def test_regenerating_gives_identical_files(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), str(tmp_path)],
        check=True,
        capture_output=True,
    )
    for name in GENERATED:
        fresh = (tmp_path / "hami" / "deviceplugin" / "api" / name).read_text(encoding="utf-8")
        assert fresh == (API / name).read_text(encoding="utf-8"), f"{name} is stale: run scripts/gen_proto.py"


def test_package_ships_no_generated_service_stubs() -> None:
    """The daemon serves through generic handlers and the kubelet stand-in calls through plain
    channel callables: no generated service classes anywhere in the package."""
    assert not list((ROOT / "src").rglob("*_grpc.py*"))


def test_wire_names_match_kubelet_v1beta1() -> None:
    services = pb.DESCRIPTOR.services_by_name
    assert pb.DESCRIPTOR.package == "v1beta1"
    assert [m.name for m in services["Registration"].methods] == ["Register"]
    plugin = services["DevicePlugin"]
    assert [m.name for m in plugin.methods] == [
        "GetDevicePluginOptions",
        "ListAndWatch",
        "GetPreferredAllocation",
        "Allocate",
        "PreStartContainer",
    ]
    assert plugin.methods_by_name["ListAndWatch"].server_streaming
    fields = pb.ContainerAllocateResponse.DESCRIPTOR.fields_by_name
    assert {n: f.number for n, f in fields.items()} == {
        "envs": 1,
        "mounts": 2,
        "devices": 3,
        "annotations": 4,
        "cdi_devices": 5,
    }
    assert pb.Device.DESCRIPTOR.fields_by_name["ID"].number == 1
    assert pb.ContainerAllocateRequest.DESCRIPTOR.fields_by_name["devices_ids"].number == 1


def test_round_trip_of_a_register_request() -> None:
    req = pb.RegisterRequest(
        version="v1beta1",
        endpoint="nvidia-gpu.sock",
        resource_name="nvidia.com/gpu",
        options=pb.DevicePluginOptions(get_preferred_allocation_available=True),
    )
    back = pb.RegisterRequest.FromString(req.SerializeToString())
    assert back.endpoint == "nvidia-gpu.sock"
    assert back.options.get_preferred_allocation_available
    assert not back.options.pre_start_required
