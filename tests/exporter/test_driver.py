"""The driver as a second source of truth: dmem files and NVML's per-cgroup limits, read from a cgroup v2
tree on disk and a fake NVML, through the monitor's own code path."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.nvml.fake import FakeNvml
from hami.core.serve.families import Family
from hami.exporter import cgroupfs
from hami.exporter.attribution import ContainerView
from hami.exporter.collector import MonitorCollector
from hami.exporter.discovery import ContainerLister
from hami.exporter.dmem import bus_id, parse_dmem, region_bus_id
from hami.exporter.driver import DriverReader
from hami.exporter.host import HostReader
from hami.exporter.reconcile import accounting_gaps
from hami.exporter.region import reasons
from hami.exporter.region.parse import DeviceUsage
from hami.exporter.view import DriverUsage, DriverView, HostDevice, MigIdentity
from hami.testing import builders
from hami.testing.cgrouptree import CgroupTree, Limits, region_of
from hami.testing.regions import MEM_DATA, RegionWriter

MIB = 1 << 20
GPU0 = "GPU-00000000-1111-2222-3333-444444444444"
GPU1 = "GPU-11111111-1111-2222-3333-444444444444"
BUS0, BUS1 = "00000000:1A:00.0", "00000000:1B:00.0"
UID_CORE = "0a1b2c3d-0000-4000-8000-000000000001"
UID_DRV = "0a1b2c3d-0000-4000-8000-000000000002"
UID_OTHER = "0a1b2c3d-0000-4000-8000-000000000003"
CID_CORE, CID_DRV, CID_OTHER = ("c" * 64, "d" * 64, "e" * 64)


def test_parse_dmem_kernel_format() -> None:
    f = parse_dmem("drm/0000:1a:00.0/vram0 1048576\ndrm/0000:1b:00.0/vram0 max\n\n")
    assert f.values == {"drm/0000:1a:00.0/vram0": 1 << 20, "drm/0000:1b:00.0/vram0": None}
    assert f.malformed == 0
    bad = parse_dmem("one-field\nr 12 extra\nr -5\nr 1e9\nr 18446744073709551616\ngood 7\n")
    assert bad.values == {"good": 7} and bad.malformed == 5
    assert bus_id(BUS0) == "0000:1a:00.0" == region_bus_id(region_of(BUS0))
    assert region_bus_id("ttm/system") is None


def test_under_root_never_joins_a_path_that_could_leave_it() -> None:
    assert cgroupfs.under_root("/sys/fs/cgroup", "kubepods/pod1/c") == "/sys/fs/cgroup/kubepods/pod1/c"
    for rel in ("kubepods/../../etc", "../x", "/etc/shadow", "kubepods//c", "kubepods/./c", ""):
        assert cgroupfs.under_root("/sys/fs/cgroup", rel) is None


def test_dmem_absent_reasons(tmp_path: Path) -> None:
    assert cgroupfs.dmem_absent(str(tmp_path / "missing")) == cgroupfs.NO_CGROUP_ROOT
    assert cgroupfs.dmem_absent(str(tmp_path)) == cgroupfs.CGROUP_V1  # no cgroup.controllers
    CgroupTree(tmp_path / "v2", dmem=False)
    assert cgroupfs.dmem_absent(str(tmp_path / "v2")) == cgroupfs.NO_DMEM_CONTROLLER
    CgroupTree(tmp_path / "dmem")
    assert cgroupfs.dmem_absent(str(tmp_path / "dmem")) is None


def test_scan_finds_both_layouts_and_refuses_what_points_outside(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path / "cg")
    tree.add_container(UID_CORE, CID_CORE, {BUS0: Limits(used=5 * MIB)})
    tree.add_container(UID_DRV, CID_DRV, {BUS0: Limits(used=1, hard=2)}, systemd=False)
    (tmp_path / "cg" / "system.slice" / "x.service").mkdir(parents=True)  # not a pod: never walked
    # a container "cgroup" that is a symlink to a directory outside the root, with dmem files of its own
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "dmem.current").write_text(f"{region_of(BUS0)} 999\n", encoding="utf-8")
    link = tmp_path / "cg" / CgroupTree.container_rel(UID_OTHER, CID_OTHER)
    link.parent.mkdir(parents=True)
    link.symlink_to(outside, target_is_directory=True)
    scan = cgroupfs.scan(str(tmp_path / "cg"))
    found = {(c.pod_uid, c.container_id): c for c in scan.containers}
    assert set(found) == {(UID_CORE, CID_CORE), (UID_DRV, CID_DRV)}
    dmem, refused = cgroupfs.CgroupIndex(str(tmp_path / "cg")).read_dmem(found[(UID_CORE, CID_CORE)])
    assert refused is None and dmem is not None
    assert dmem["current"].values == {region_of(BUS0): 5 * MIB}
    assert found[(UID_DRV, CID_DRV)].path == str(
        tmp_path / "cg" / CgroupTree.container_rel(UID_DRV, CID_DRV, systemd=False)
    )
    assert list(scan.refused.values()) == [frozenset({reasons.CGROUP_OUTSIDE_ROOT})]


def test_a_cgroup_removed_mid_read_is_vanished(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path)
    path = tree.add_container(UID_CORE, CID_CORE, {BUS0: Limits(used=1)})
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert cgroupfs.read_dmem(fd)[1] is False
        tree.remove(path)  # the container exits between the walk and the read
        assert cgroupfs.read_dmem(fd)[1] is True
    finally:
        os.close(fd)


def _pod(uid: str, name: str, cid: str, gpu: str, mem_mib: int) -> dict[str, Any]:
    pod = builders.pod(
        {"name": "main"},
        name=name,
        namespace="team-a",
        uid=uid,
        annotations={"hami.io/vgpu-devices-allocated": f"{gpu},NVIDIA,{mem_mib},0:;"},
        phase="Running",
    )
    pod["status"]["containerStatuses"] = [{"name": "main", "containerID": f"containerd://{cid}"}]
    return pod


class Node:
    """One HAMi-core container whose shim under-reports, one the driver limits, one more HAMi-core one."""

    def __init__(self, tmp_path: Path, *, driver_calls: bool = True, dmem: bool = True) -> None:
        self.cg = tmp_path / "cgroup"
        self.tree = CgroupTree(self.cg, dmem=dmem, capacity={BUS0: 32768 * MIB, BUS1: 32768 * MIB})
        self.paths = {
            "core": self.tree.add_container(UID_CORE, CID_CORE, {BUS0: Limits(used=3072 * MIB)}),
            "drv": self.tree.add_container(
                UID_DRV, CID_DRV, {BUS0: Limits(used=1024 * MIB, soft=512 * MIB, hard=2048 * MIB)}
            ),
            "other": self.tree.add_container(UID_OTHER, CID_OTHER, {BUS1: Limits(used=100 * MIB)}),
        }
        spec = {
            "memory_limits": driver_calls,
            "devices": [
                {
                    "uuid": GPU0,
                    "memory_mib": 32768,
                    "pci_bus_id": BUS0,
                    "cgroup_memory": {
                        str(self.paths["core"]): {"used_mib": 3072},
                        str(self.paths["drv"]): {"soft_mib": 512, "hard_mib": 2048, "used_mib": 1024},
                    },
                },
                {
                    "uuid": GPU1,
                    "memory_mib": 32768,
                    "pci_bus_id": BUS1,
                    "cgroup_memory": {str(self.paths["other"]): {"used_mib": 100}},
                },
            ],
        }
        self.nvml = FakeNvml(spec)
        self.now = [0.0]
        self.index = cgroupfs.CgroupIndex(str(self.cg), clock=lambda: self.now[0])
        hook = tmp_path / "hook"
        self.writers = []
        for uid, gpu, used in ((UID_CORE, GPU0, 1024), (UID_OTHER, GPU1, 100)):
            d = hook / "containers" / f"{uid}_main"
            d.mkdir(parents=True)
            w = RegionWriter.create(str(d / "0b1c.cache"), "v1.2")
            w.initialise([gpu], limits=[4096 * MIB], sm_limits=[0])
            w.change_memory(w.add_process(7), 0, MEM_DATA, used * MIB)
            self.writers.append(w)
        self.lister = ContainerLister(str(hook))
        self.lister.update(None)
        self.pods = [
            _pod(UID_CORE, "trainer", CID_CORE, GPU0, 4096),
            _pod(UID_DRV, "driver-limited", CID_DRV, GPU0, 2048),
            _pod(UID_OTHER, "other", CID_OTHER, GPU1, 4096),
        ]
        self.collector = MonitorCollector(
            "node-1",
            self.lister,
            lambda: self.pods,
            decode_pod_devices,
            driver=DriverReader(self.nvml, str(self.cg), lambda calls: None, self.index),
        )
        self.collector.hosts = HostReader(self.nvml, self.collector.nvml_errors.add).read

    def families(self) -> dict[str, Family]:
        return {f.name: f for f in self.collector.families()}

    def close(self) -> None:
        self.index.close()
        self.lister.close()
        for w in self.writers:
            w.close()
        self.nvml.close()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    yield n
    n.close()


def _rows(fam: Family, **match: str) -> dict[tuple[str, ...], float]:
    out = {}
    for names, values, value in fam.rows:
        labels = dict(zip(names, values, strict=True))
        if all(labels.get(k) == v for k, v in match.items()):
            out[tuple(labels[k] for k in ("pod", "source", *(["limit"] if "limit" in labels else [])))] = (
                value
            )
    return out


def test_both_sources_beside_hami_core_and_the_gap(node: Node) -> None:
    fams = node.families()
    used = _rows(fams["hami_vgpu_source_memory_used_bytes"])
    assert used == {
        ("trainer", "hami-core"): 1024 * MIB,
        ("trainer", "nvml"): 3072 * MIB,
        ("trainer", "dmem"): 3072 * MIB,
        ("driver-limited", "nvml"): 1024 * MIB,  # no region: no hami-core row
        ("driver-limited", "dmem"): 1024 * MIB,
        ("other", "hami-core"): 100 * MIB,
        ("other", "nvml"): 100 * MIB,
        ("other", "dmem"): 100 * MIB,
    }
    limits = _rows(fams["hami_vgpu_source_memory_limit_bytes"], pod="driver-limited")
    assert limits == {
        ("driver-limited", "nvml", "soft"): 512 * MIB,
        ("driver-limited", "nvml", "hard"): 2048 * MIB,
        ("driver-limited", "dmem", "soft"): 512 * MIB,
        ("driver-limited", "dmem", "hard"): 2048 * MIB,
    }
    # no limit: 0, HAMi's convention, from NVML_DEVICE_MEMORY_LIMIT_MAX and from dmem's "max"
    assert set(_rows(fams["hami_vgpu_source_memory_limit_bytes"], pod="trainer", limit="soft").values()) == {
        0
    }
    assert _rows(fams["hami_vgpu_source_memory_limit_bytes"], pod="trainer", limit="hard") == {
        ("trainer", "hami-core", "hard"): 4096 * MIB,
        ("trainer", "nvml", "hard"): 0,
        ("trainer", "dmem", "hard"): 0,
    }
    assert _rows(fams["hami_vgpu_memory_accounting_gap_bytes"]) == {
        ("trainer", "nvml"): 2048 * MIB,
        ("trainer", "dmem"): 2048 * MIB,
        ("other", "nvml"): 0,
        ("other", "dmem"): 0,
    }
    avail = {v[0]: (v[1], x) for _, v, x in fams["hami_monitor_driver_source_available"].rows}
    assert avail == {"nvml": ("available", 1), "dmem": ("available", 1)}


def test_bad_input_is_counted_and_hides_no_other_container(node: Node) -> None:
    node.families()
    (node.paths["other"] / "dmem.max").write_text("garbage line here\n", encoding="utf-8")
    (node.paths["other"] / "dmem.current").write_text(
        f"{region_of(BUS1)} {100 * MIB}\nnot-a-number x\n", encoding="utf-8"
    )
    link = node.cg / CgroupTree.container_rel("0a1b2c3d-0000-4000-8000-00000000000f", "f" * 64)
    link.parent.mkdir(parents=True)
    link.symlink_to("/", target_is_directory=True)
    fams = node.families()
    # the walk is kept: a new directory is seen at the next walk, a minute after the last
    assert {v[0]: x for _, v, x in fams["hami_monitor_region_skips"].rows}[reasons.CGROUP_OUTSIDE_ROOT] == 0
    node.now[0] += cgroupfs.REWALK_S
    for _ in range(2):  # a cgroup that stays broken counts once
        fams = node.families()
    skips = {v[0]: x for _, v, x in fams["hami_monitor_region_skips"].rows}
    assert skips[reasons.DMEM_MALFORMED] == 1 and skips[reasons.CGROUP_OUTSIDE_ROOT] == 1
    now = {v[0]: x for _, v, x in fams["hami_monitor_regions_skipped"].rows}
    assert now[reasons.DMEM_MALFORMED] == 1
    used = _rows(fams["hami_vgpu_source_memory_used_bytes"])
    assert used[("other", "dmem")] == 100 * MIB  # its good lines are kept
    assert used[("trainer", "dmem")] == 3072 * MIB and used[("driver-limited", "nvml")] == 1024 * MIB
    # the driver-limited container's cgroup goes between the walk and the NVML call
    node.nvml.remove_cgroup(str(node.paths["drv"]))
    fams = node.families()
    assert ("driver-limited", "nvml") not in _rows(fams["hami_vgpu_source_memory_used_bytes"])
    assert {v[0]: x for _, v, x in fams["hami_monitor_region_skips"].rows}[reasons.CGROUP_VANISHED] == 1


def test_absent_sources_are_reported_with_their_reason(tmp_path: Path) -> None:
    n = Node(tmp_path, driver_calls=False, dmem=False)
    try:
        for _ in range(2):
            fams = n.families()
        avail = {v[0]: (v[1], x) for _, v, x in fams["hami_monitor_driver_source_available"].rows}
        assert avail == {"nvml": ("driver_too_old", 0), "dmem": ("no_dmem_controller", 0)}
        assert {k[1] for k in _rows(fams["hami_vgpu_source_memory_used_bytes"])} == {"hami-core"}
        assert n.nvml.calls["nvmlDeviceGetMemoryLimits_v1"] == 1  # asked once, at the probe
        assert fams["hami_vgpu_memory_used_bytes"].rows  # the HAMi-core families are untouched
    finally:
        n.close()


def test_driver_limited_container_is_not_unlimited(node: Node) -> None:
    """A GPU process of the driver-limited container runs without HAMi-core, limited all the same."""
    procs = node.cg.parent / "proc"
    (procs / "4242").mkdir(parents=True)
    rel = CgroupTree.container_rel(UID_DRV, CID_DRV)
    (procs / "4242" / "cgroup").write_text(f"0::/{rel}\n", encoding="utf-8")
    node.nvml.set_processes(0, [(4242, 1024 * MIB)])
    node.collector._proc_root = str(procs)
    assert node.families()["hami_vgpu_unlimited_processes"].rows == []
    node.nvml.device(0).set_memory_limits(str(node.paths["drv"]), 0, (1 << 64) - 1)  # limits cleared
    node.tree.set_dmem(node.paths["drv"], {BUS0: Limits(used=1024 * MIB)})
    rows = node.families()["hami_vgpu_unlimited_processes"].rows
    assert [(dict(zip(n, v, strict=True))["pod"], x) for n, v, x in rows] == [("driver-limited", 1)]


def test_the_walk_is_kept_and_done_again_for_a_container_it_does_not_know(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path)
    tree.add_container(UID_CORE, CID_CORE, {BUS0: Limits(used=1)})
    now = [0.0]
    index = cgroupfs.CgroupIndex(str(tmp_path), clock=lambda: now[0])
    assert set(index.lookup({(UID_CORE, CID_CORE)})[0]) == {(UID_CORE, CID_CORE)}
    tree.add_container(UID_DRV, CID_DRV, {BUS0: Limits(used=2)})  # a container starts
    assert index.lookup({(UID_DRV, CID_DRV)})[0] == {}  # within MISS_REWALK_S of the last walk
    now[0] += cgroupfs.MISS_REWALK_S
    found, _ = index.lookup({(UID_CORE, CID_CORE), (UID_DRV, CID_DRV)})
    assert set(found) == {(UID_CORE, CID_CORE), (UID_DRV, CID_DRV)}
    # the directory is swapped for a symlink after the walk: the read refuses it, the index forgets it
    cg = found[(UID_DRV, CID_DRV)]
    tree.remove(Path(cg.path))
    Path(cg.path).symlink_to(tmp_path / "kubepods.slice", target_is_directory=True)
    assert index.read_dmem(cg) == (None, reasons.CGROUP_OUTSIDE_ROOT)
    Path(cg.path).unlink()
    assert index.read_dmem(cg) == (None, reasons.CGROUP_VANISHED)
    assert index.read_dmem(found[(UID_CORE, CID_CORE)])[1] is None


def test_no_gap_for_a_device_over_its_limit() -> None:
    dev = DeviceUsage(0, GPU0, 1 << 30, 100, 1 << 30, 0, 0, 0, 0, 0)
    view = ContainerView("ns", "p", "c", (dev,), 1, 0, True)
    reading = DriverUsage("ns", "p", "c", 0, GPU0, "nvml", 0, 0, 3 << 30)
    assert accounting_gaps([view], [reading]) == [(reading, 2 << 30)]
    clamped = replace(view, devices=(replace(dev, over_limit=True),))
    assert accounting_gaps([clamped], [reading]) == []
    assert accounting_gaps([replace(view, started=False)], [reading]) == []  # no region, no self-report


# ---- DriverReader alone: the nvml probe's outcomes, MIG, the log-once, the walk and the dmem regions ----

GIB = 1 << 30


def _view(pod: str, gpu: str) -> ContainerView:
    dev = DeviceUsage(0, gpu, 4 * GIB, 100, 0, 0, 0, 0, 0, 0)
    return ContainerView("team-a", pod, "main", (dev,), 1, 0, True)


class Reader:
    """Two containers, one per GPU, each with its cgroup and dmem files; NVML's spec per test."""

    def __init__(self, tmp_path: Path, *, mig: bool = False, nvml: bool = True) -> None:
        self.tree = CgroupTree(tmp_path / "cg", capacity={BUS0: 32 * GIB, BUS1: 32 * GIB})
        self.paths = {
            "a": self.tree.add_container(UID_CORE, CID_CORE, {BUS0: Limits(used=GIB)}),
            "b": self.tree.add_container(UID_OTHER, CID_OTHER, {BUS1: Limits(used=2 * GIB)}),
        }
        # a GPU in MIG mode (the fake then answers NOT_SUPPORTED, as the driver does)
        mig_spec = {"enabled": True, "profiles": []} if mig else {"enabled": False}
        gpus = ((GPU0, BUS0, self.paths["a"], 1024), (GPU1, BUS1, self.paths["b"], 2048))
        spec = {
            "devices": [
                {"uuid": uuid, "memory_mib": 32768, "pci_bus_id": bus, "mig": mig_spec,
                 "cgroup_memory": {str(path): {"used_mib": used}}}
                for uuid, bus, path, used in gpus
            ],
        }  # fmt: skip
        self.nvml = FakeNvml(spec) if nvml else None
        self.hosts = [
            HostDevice(0, GPU0, "A100", pci_bus_id=BUS0),
            HostDevice(1, GPU1, "A100", pci_bus_id=BUS1),
        ]
        self.pods = [_pod(UID_CORE, "a", CID_CORE, GPU0, 4096), _pod(UID_OTHER, "b", CID_OTHER, GPU1, 4096)]
        self.containers = [_view("a", GPU0), _view("b", GPU1)]
        self.reader = DriverReader(self.nvml, str(self.tree.root), lambda calls: None)

    def read(self, hosts: list[HostDevice] | None = None) -> DriverView:
        return self.reader.read(self.pods, self.containers, self.hosts if hosts is None else hosts)

    def close(self) -> None:
        self.reader.close()
        if self.nvml is not None:
            self.nvml.close()


def _sources(view: DriverView) -> set[tuple[str, str]]:
    return {(u.pod, u.source) for u in view.usage}


def test_a_mig_gpu_is_not_asked_for_a_container_and_its_dmem_still_is(tmp_path: Path) -> None:
    r = Reader(tmp_path)
    try:
        mig = MigIdentity("MIG-aaaa", "1g.5gb", 7, 0)
        view = r.read([replace(r.hosts[0], migs=(mig,)), r.hosts[1]])
        assert view.sources == {"nvml": "available", "dmem": "available"}
        # the fake would answer for GPU0: the row is missing because the reader skips MIG handles
        assert _sources(view) == {("a", "dmem"), ("b", "nvml"), ("b", "dmem")}
        assert view.skipped == {}
    finally:
        r.close()


@pytest.mark.parametrize(
    ("case", "reason"), [("mig", "not_supported"), ("no-nvml", "no_nvml"), ("no-gpu", "no_gpu")]
)
def test_an_absent_nvml_source_says_why_and_leaves_dmem_alone(
    case: str, reason: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    r = Reader(tmp_path, mig=case == "mig", nvml=case != "no-nvml")
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(5):
                view = r.read([] if case == "no-gpu" else None)
        assert view.sources == {"nvml": reason, "dmem": "available"}
        assert {s for _, s in _sources(view)} <= {"dmem"}
        assert _sources(view) == (set() if case == "no-gpu" else {("a", "dmem"), ("b", "dmem")})
        absent = [r.getMessage() for r in caplog.records if "absent" in r.getMessage()]
        assert absent == [f"The driver's per-container memory accounting through nvml is absent: {reason}"]
        if case == "no-gpu":  # no GPU to ask yet: asked again once there is one
            assert r.read().sources == {"nvml": "available", "dmem": "available"}
    finally:
        r.close()


def test_a_cgroup_removed_during_the_walk_is_counted_and_hides_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = Reader(tmp_path)
    try:
        gone = r.paths["a"].parent  # the pod's directory: listed by its parent, gone before its own listing
        scandir = os.scandir

        def racing(path: Any) -> Any:
            if isinstance(path, int) and os.path.samestat(os.fstat(path), os.stat(gone)):
                raise FileNotFoundError(errno.ENOENT, "No such file or directory")
            return scandir(path)

        monkeypatch.setattr(os, "scandir", racing)
        view = r.read()
        assert view.skipped == {reasons.CGROUP_VANISHED: 1}
        assert view.refused == {str(gone.relative_to(r.tree.root)): frozenset({reasons.CGROUP_VANISHED})}
        assert _sources(view) == {("b", "nvml"), ("b", "dmem")}
    finally:
        r.close()


def test_a_gpu_no_dmem_region_names_is_counted_and_read_through_nvml(tmp_path: Path) -> None:
    """The region of a GPU is found by its PCI bus id (``drm/<bus>/vram0``); where none matches, the
    container's dmem row for that GPU is left out and counted, its NVML row and the others stay."""
    r = Reader(tmp_path)
    try:
        r.tree.set_dmem(r.paths["a"], {"00000000:99:00.0": Limits(used=GIB)})  # a region of no known GPU
        view = r.read()
        assert view.skipped == {reasons.DMEM_NO_REGION: 1}
        assert view.refused == {
            str(r.paths["a"].relative_to(r.tree.root)): frozenset({reasons.DMEM_NO_REGION})
        }
        assert _sources(view) == {("a", "nvml"), ("b", "nvml"), ("b", "dmem")}
    finally:
        r.close()
