"""The truth reconciler through the monitor's scrape: real regions (ctypes writer), pods, fake NVML."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.nvml.fake import FakeNvml
from hami.exporter.collector import MonitorCollector
from hami.exporter.discovery import ContainerLister
from hami.exporter.host import HostReader
from hami.exporter.reconcile import GRACE_OBSERVATIONS, KINDS
from hami.testing import builders
from hami.testing.regions import MEM_DATA, RegionWriter

GPU0 = "GPU-00000000-1111-2222-3333-444444444444"
GPU1 = "GPU-11111111-1111-2222-3333-444444444444"
MIB = 1 << 20


def _pod(uid: str, *, allocated: bool = True, phase: str = "Running") -> dict[str, Any]:
    return builders.pod(
        {"name": "main"},
        name=f"pod-{uid}",
        namespace="team-a",
        uid=uid,
        annotations={"hami.io/vgpu-devices-allocated": f"{GPU0},NVIDIA,2048,25:;"} if allocated else {},
        phase=phase,
    )


class Node:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.writers: list[RegionWriter] = []
        (root / "containers").mkdir(parents=True, exist_ok=True)
        self.lister = ContainerLister(str(root))
        self.pods: list[dict[str, Any]] = []
        self.collector: MonitorCollector | None = None
        self.registry = CollectorRegistry()

    def settled(self, pods: list[dict[str, Any]], nvml: FakeNvml) -> dict[str, float]:
        """The counts once every finding has had its grace of observations."""
        for _ in range(GRACE_OBSERVATIONS - 1):
            self.scrape(pods, nvml)
        return self.scrape(pods, nvml)

    def region(self, uid: str, used_mib: int) -> None:
        d = self.root / "containers" / f"{uid}_main"
        d.mkdir(parents=True)
        w = RegionWriter.create(str(d / "0b1c.cache"), "v1.2")
        w.initialise([GPU0], limits=[4 << 30], sm_limits=[0])
        w.change_memory(w.add_process(10, 1000), 0, MEM_DATA, used_mib * MIB)
        self.writers.append(w)

    def garbage_region(self, uid: str) -> None:
        d = self.root / "containers" / f"{uid}_main"
        d.mkdir(parents=True)
        (d / "0b1c.cache").write_bytes(b"\x07" * 64)

    def scrape(self, pods: list[dict[str, Any]], nvml: FakeNvml) -> dict[str, float]:
        """One scrape of the node's one monitor (findings settle over its scrapes)."""
        self.lister.update(None)
        self.pods = pods
        if self.collector is None:
            self.collector = MonitorCollector("node-1", self.lister, lambda: self.pods, decode_pod_devices)
            self.registry.register(self.collector)
        self.collector.hosts = HostReader(nvml, self.collector.nvml_errors.add).read
        text = generate_latest(self.registry).decode()
        found = {}
        for line in text.splitlines():
            if line.startswith("hami_inconsistency{"):
                kind = line.split('kind="')[1].split('"')[0]
                found[kind] = float(line.rsplit(" ", 1)[1])
        return found

    def close(self) -> None:
        self.lister.close()
        for w in self.writers:
            w.close()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    yield n
    n.close()


def _nvml(*processes: dict[str, int]) -> FakeNvml:
    return FakeNvml(
        {
            "devices": [
                {
                    "uuid": GPU0,
                    "name": "Tesla V100-PCIE-32GB",
                    "memory_mib": 32768,
                    "processes": list(processes),
                },
                # NVML cannot say what this card's process holds: the card is not judged.
                {
                    "uuid": GPU1,
                    "name": "Tesla V100-PCIE-32GB",
                    "memory_mib": 32768,
                    "processes": [{"pid": 7}],
                },
            ]
        }
    )


def test_a_consistent_node_exports_every_kind_at_zero(node: Node) -> None:
    node.region("uid-a", 1024)
    # NVML's process memory is a little above the region's (driver context): within the tolerance.
    got = node.settled([_pod("uid-a")], _nvml({"pid": 1000, "used_mib": 1024 + 200}))
    assert got == dict.fromkeys(KINDS, 0.0)


def test_each_kind_of_disagreement(node: Node) -> None:
    node.region("uid-a", 1024)  # consistent
    node.region("uid-gone", 512)  # its pod was deleted and its process still runs: region without pod
    node.garbage_region("uid-b")  # allocated, but its region cannot be read
    pods = [
        _pod("uid-a"),
        _pod("uid-b"),
        _pod("uid-c"),  # allocated, no region at all
        _pod("uid-d", phase="Succeeded"),  # finished: its allocation no longer counts
        _pod("uid-e", allocated=False),  # not a HAMi pod
    ]
    # A process outside HAMi holds 2 GiB on GPU0 beside the two regions' 1.5 GiB.
    nvml = _nvml(
        {"pid": 1000, "used_mib": 1024}, {"pid": 1001, "used_mib": 512}, {"pid": 4242, "used_mib": 2048}
    )
    # A finding settles over GRACE_OBSERVATIONS scrapes: none counts at the first.
    assert node.scrape(pods, nvml) == dict.fromkeys(KINDS, 0.0)
    for t in range(1, GRACE_OBSERVATIONS):
        node.writers[1].launch_kernel(t)  # the orphan's process still runs: it writes its region
        assert node.scrape(pods, nvml)["region_without_pod"] == 0.0
    node.writers[1].launch_kernel(GRACE_OBSERVATIONS)
    assert node.scrape(pods, nvml) == {
        "allocation_without_region": 1.0,
        "region_without_pod": 1.0,
        "region_unreadable": 1.0,
        "memory_outside_hami": 1.0,
    }


def test_an_nvml_failure_is_not_a_finding(node: Node) -> None:
    node.region("uid-a", 1024)
    nvml = _nvml({"pid": 1000, "used_mib": 4096})
    nvml.fail("nvmlDeviceGetComputeRunningProcesses", device=0)
    assert node.settled([_pod("uid-a")], nvml)["memory_outside_hami"] == 0.0


def test_a_node_s_churn_settles_to_nothing(node: Node) -> None:
    """Containers come, allocate and exit, as on any node: each finding lasts less than its grace."""
    nvml = _nvml()
    # Allocated, CUDA not called yet: no region for one scrape, then its region appears.
    assert node.scrape([_pod("uid-a")], nvml) == dict.fromkeys(KINDS, 0.0)
    node.region("uid-a", 0)
    assert node.scrape([_pod("uid-a")], nvml) == dict.fromkeys(KINDS, 0.0)
    # The pod ends: its region stays as it left it until the monitor's GC, however many scrapes.
    for _ in range(2 * GRACE_OBSERVATIONS):
        assert node.scrape([], nvml) == dict.fromkeys(KINDS, 0.0)
    # A container that never gets a region is reported once its grace has passed.
    got = [node.scrape([_pod("uid-c")], nvml)["allocation_without_region"] for _ in range(GRACE_OBSERVATIONS)]
    assert got == [0.0] * (GRACE_OBSERVATIONS - 1) + [1.0]
