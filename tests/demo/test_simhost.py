"""The demo's GPU node as the monitor's reconciler sees it: NVML lists every process on a card, and only
the process of the container without HAMi-core holds memory that no region accounts for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hami.core.codec.pod_devices import decode_pod_devices
from hami.demo.simhost import LEAK_CEILING, LEAK_FLOOR, UNLIMITED_USE, PodDrivenNode
from hami.exporter.host import HostReader
from hami.exporter.reconcile import Settled, reconcile
from hami.exporter.region.parse import RegionSnapshot, parse_region
from hami.testing import cluster
from hami.testing.simnode import MIB


def _pods() -> list[dict[str, Any]]:
    pods = [cluster.gpu_pod(p) for p in cluster.POD_SPECS] + [cluster.unlimited_pod()]
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"00000000-0000-4000-8000-{i:012x}"  # the API server would assign one
    return pods


def _regions(hook: Path) -> dict[tuple[str, str], RegionSnapshot]:
    out = {}
    for path in hook.glob("containers/*/*.cache"):
        data = path.read_bytes()
        snap = parse_region(data, len(data))
        assert isinstance(snap, RegionSnapshot), snap
        uid, _, container = path.parent.name.partition("_")
        out[(uid, container)] = snap
    return out


def test_only_the_card_of_the_container_without_hami_core_has_memory_outside_hami(tmp_path: Path) -> None:
    pods = _pods()
    node = PodDrivenNode(str(tmp_path / "vgpu"), 4, lambda: pods, str(tmp_path / "proc"))
    for _ in range(5):
        node.step()
    hosts = HostReader(node.nvml, lambda errors: None).read()
    regions = _regions(tmp_path / "vgpu")
    found = reconcile(pods, regions, (), decode=decode_pod_devices, hosts=hosts)

    outside = [f for f in found if f.kind == "memory_outside_hami"]
    assert [f.subject for f in outside] == [cluster.gpu_uuid(0, cluster.UNLIMITED.gpu)]
    card = next(h for h in hosts if h.uuid == outside[0].subject)
    accounted = sum(d.used_bytes for s in regions.values() for d in s.devices if d.uuid == card.uuid)
    assert card.process_memory == accounted + UNLIMITED_USE
    # Every region's processes are NVML's too: the other cards' process memory is what HAMi-core counts.
    for h in hosts:
        if h.uuid != card.uuid:
            assert h.process_memory == sum(
                d.used_bytes for s in regions.values() for d in s.devices if d.uuid == h.uuid
            )
    assert [f.subject for f in found if f.kind == "allocation_without_region"] == [
        f"{cluster.UNLIMITED.namespace}/{cluster.UNLIMITED.name}/main"
    ]


def test_the_leaking_container_grows_at_its_rate_and_its_card_with_it(tmp_path: Path) -> None:
    """Its memory follows the clock, not the random walk; NVML's card total is every region's use, so
    the card grows by the leak beside the jitter of the other containers on it."""
    pods = [*_pods(), cluster.gpu_pod(cluster.OVERLIMIT), cluster.gpu_pod(cluster.LEAKY)]
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"00000000-0000-4000-8000-{i:012x}"
    now = [1000.0]
    node = PodDrivenNode(
        str(tmp_path / "vgpu"), 4, lambda: pods, str(tmp_path / "proc"), leak_rate=16.0, clock=lambda: now[0]
    )
    leaked = []
    for _ in range(6):
        node.step()
        regions = _regions(tmp_path / "vgpu")
        leaky = next(s for (uid, _), s in regions.items() if uid == pods[-1]["metadata"]["uid"])
        leaked.append(leaky.devices[0].used_bytes)
        nvml = node.nvml.device(cluster.OVERCOMMIT_GPU).memory_info().used
        assert nvml == sum(sum(c.used.values()) for c in node.containers if c.gpu == cluster.OVERCOMMIT_GPU)
        now[0] += 10.0
    assert leaked == [LEAK_FLOOR + i * 160 * MIB for i in range(6)]
    # at the ceiling the job restarts: back to the floor, and it grows again
    now[0] += (LEAK_CEILING - LEAK_FLOOR) / (16 * MIB) - 60.0
    node.step()
    regions = _regions(tmp_path / "vgpu")
    leaky = next(s for (uid, _), s in regions.items() if uid == pods[-1]["metadata"]["uid"])
    assert leaky.devices[0].used_bytes == LEAK_FLOOR


def test_the_demo_node_s_churn_raises_no_inconsistency_only_its_scenario_does(tmp_path: Path) -> None:
    """Batch pods come (allocated before their first CUDA call), run and go (their regions left for the
    GC), the monitor observing before and after each step of the node: what settles is only the
    container without HAMi-core, the "GPU not limited" scenario."""
    pods = _pods()
    node = PodDrivenNode(str(tmp_path / "vgpu"), 4, lambda: pods, str(tmp_path / "proc"))
    settled = Settled()
    seen: set[tuple[str, str]] = set()

    def observe() -> None:
        hosts = HostReader(node.nvml, lambda errors: None).read()
        regions = _regions(tmp_path / "vgpu")
        found = reconcile(pods, regions, (), decode=decode_pod_devices, hosts=hosts)
        seen.update((f.kind, f.subject) for f in settled.observe(found, regions))

    for i in range(24):
        if i % 3 == 0:  # a batch pod arrives, bound and allocated
            batch = cluster.gpu_pod(cluster.GpuPod("ml-batch", f"batch-{i}", i % 4, 1024, 10))
            batch["metadata"]["uid"] = f"00000000-0000-4000-9000-{i:012x}"
            pods.append(batch)
        if i % 3 == 2 and i > 6:  # the oldest batch pod is deleted
            pods.remove(next(p for p in pods if p["metadata"]["namespace"] == "ml-batch"))
        observe()
        node.step()
        observe()
    unlimited = f"{cluster.UNLIMITED.namespace}/{cluster.UNLIMITED.name}/main"
    assert seen == {
        ("allocation_without_region", unlimited),
        ("memory_outside_hami", cluster.gpu_uuid(0, cluster.UNLIMITED.gpu)),
    }
