"""The "GPU not limited" branch: GPU processes of HAMi containers that run without a region file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.nvml.fake import FakeNvml
from hami.exporter.attribution import CONTROL_DISABLED, NO_CACHE_DIR, NO_REGION, unlimited_containers
from hami.exporter.cgroups import owner_of, parse_cgroup
from hami.exporter.collector import MonitorCollector
from hami.exporter.discovery import ContainerLister
from hami.exporter.host import HostReader
from hami.testing.regions import RegionWriter

UID = "7c1e7f0a-3b2d-4c5e-8f90-a1b2c3d4e5f6"
CID = "4f" * 32
GPU = "GPU-00000000-1111-2222-3333-444444444444"


@pytest.mark.parametrize(
    "text",
    [
        f"12:memory:/kubepods/burstable/pod{UID}/{CID}\n11:cpu:/kubepods/burstable/pod{UID}/{CID}\n",
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice/"
        f"cri-containerd-{CID}.scope\n",
        f"1:name=systemd:/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/docker-{CID}.scope\n",
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
        f"crio-{CID}.scope/container\n",
    ],
    ids=["cgroupfs-v1", "systemd-v2-containerd", "systemd-docker", "crio-nested"],
)
def test_every_kubelet_cgroup_layout_names_pod_and_container(text: str) -> None:
    assert parse_cgroup(text) == (UID, CID)


def test_processes_outside_pods_have_no_owner(tmp_path: Path) -> None:
    assert parse_cgroup("0::/system.slice/sshd.service\n") is None
    assert parse_cgroup(f"0::/kubepods.slice/kubepods-pod{UID}.slice\n") is None  # the pod, no container
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(f"0::/kubepods/pod{UID}/{CID}\n", encoding="utf-8")
    assert owner_of(42, str(tmp_path)) == (UID, CID)
    assert owner_of(43, str(tmp_path)) is None  # exited between NVML and /proc


def _pod(
    uid: str, containers: dict[str, str], allocated: str, *, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """A running pod; ``containers`` maps each container name to its container ID."""
    annotations = {"hami.io/vgpu-devices-allocated": allocated} if allocated else {}
    envs = [{"name": k, "value": v} for k, v in (env or {}).items()]
    return {
        "metadata": {"uid": uid, "name": f"p-{uid}", "namespace": "ml", "annotations": annotations},
        "spec": {"containers": [{"name": n, "env": envs} for n in containers]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": n, "containerID": f"containerd://{i}"} for n, i in containers.items()
            ],
        },
    }


ONE = f"{GPU},NVIDIA,1000,30:;"


def test_reasons_and_what_is_left_out() -> None:
    c = {k: f"{k:0>64}" for k in ("a", "b", "c", "d", "e", "f", "g")}
    pods = [
        _pod("uid-nodir", {"main": c["a"]}, ONE),
        _pod("uid-nofile", {"main": c["b"]}, ONE),
        _pod("uid-off", {"main": c["c"]}, ONE, env={"CUDA_DISABLE_CONTROL": "true"}),
        _pod("uid-ok", {"main": c["d"]}, ONE),  # has its region: limited
        _pod("uid-plain", {"main": c["e"]}, ""),  # a GPU pod HAMi did not allocate
        {**_pod("uid-mig", {"main": c["f"]}, ONE), "metadata": {
            **_pod("uid-mig", {"main": c["f"]}, ONE)["metadata"],
            "annotations": {"hami.io/vgpu-devices-allocated": ONE, "hami.io/vgpu-mig-allocations": "[]"}}},
        _pod("uid-idle", {"main": c["g"]}, ONE),  # no GPU process
    ]  # fmt: skip
    owners = [
        ("uid-nodir", c["a"]),
        ("uid-nodir", c["a"]),
        ("uid-nofile", c["b"]),
        ("uid-off", c["c"]),
        ("uid-ok", c["d"]),
        ("uid-plain", c["e"]),
        ("uid-mig", c["f"]),
    ]
    files = {("uid-nofile", "main"): False, ("uid-off", "main"): False, ("uid-ok", "main"): True}
    got = unlimited_containers(pods, owners, files, decode_pod_devices)
    assert [(u.pod, u.reason, u.processes) for u in got] == [
        ("p-uid-nodir", NO_CACHE_DIR, 2),
        ("p-uid-nofile", NO_REGION, 1),
        ("p-uid-off", CONTROL_DISABLED, 1),
    ]


def test_the_monitor_exports_them(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    (hook / "containers" / f"{UID}_main").mkdir(parents=True)  # prepared by Allocate, no region yet
    limited = hook / "containers" / f"{UID}_side"
    limited.mkdir()
    writer = RegionWriter.create(str(limited / "0b1c.cache"), "v1.2")
    writer.initialise([GPU], limits=[1 << 30], sm_limits=[30])
    proc = tmp_path / "proc"
    side = "5e" * 32
    for pid, cid in ((4001, CID), (4002, CID), (4003, side)):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(f"0::/kubepods/pod{UID}/{cid}\n", encoding="utf-8")
    pod = _pod(UID, {"main": CID, "side": side}, f"{GPU},NVIDIA,1000,30:;{GPU},NVIDIA,500,0:;")
    nvml = FakeNvml({"devices": [{"uuid": GPU, "memory_mib": 16384, "processes": [
        {"pid": 4001, "used_mib": 100}, {"pid": 4002, "used_mib": 100}, {"pid": 4003, "used_mib": 100},
        {"pid": 9999, "used_mib": 100},  # a host process outside any pod
    ]}]})  # fmt: skip
    lister = ContainerLister(str(hook))
    lister.update(None)
    collector = MonitorCollector("n1", lister, lambda: [pod], decode_pod_devices, proc_root=str(proc))
    collector.hosts = HostReader(nvml, collector.nvml_errors.add).read
    try:
        text = b"".join(collector.render(openmetrics=False)).decode()
    finally:
        lister.close()
        writer.close()
    rows = [line for line in text.splitlines() if line.startswith("hami_vgpu_unlimited_processes{")]
    assert rows == [
        f'hami_vgpu_unlimited_processes{{container="main",namespace="ml",node="n1",pod="p-{UID}",'
        'reason="no_region",zone="vGPU"} 2.0'
    ]
