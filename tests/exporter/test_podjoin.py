"""The pod side of a scrape follows every change of the pods, the region set and the regions' values."""

from __future__ import annotations

from typing import Any

from hami.core.codec.mig import decode_mig_allocations
from hami.core.codec.pod_devices import decode_pod_devices
from hami.exporter.podjoin import PodJoin
from hami.exporter.region.parse import DeviceUsage, RegionSnapshot

UUID = "GPU-aaaaaaaa-1111-2222-3333-444444444444"


def pod(uid: str, mem_mib: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "uid": uid, "name": f"p-{uid}", "namespace": "ns", "labels": labels or {},
            "annotations": {"hami.io/vgpu-devices-allocated": f"{UUID},NVIDIA,{mem_mib},30:;"},
        },
        "spec": {"containers": [{"name": "main"}]},
        "status": {"phase": "Running"},
    }


def snapshot(used: int) -> RegionSnapshot:
    dev = DeviceUsage(0, UUID, 1 << 30, 30, used, 0, 0, used, 0, 0)
    return RegionSnapshot("v1.2", (dev,), 1, 0, 0, 0, 0, ())


def join() -> PodJoin:
    errors: list[str] = []
    return PodJoin(decode_pod_devices, decode_mig_allocations, ("app",),
                   lambda p, e: errors.append(str(e)), lambda p, d: errors.append(d))


def test_side_is_derived_again_when_a_pod_object_or_the_region_set_changes() -> None:
    j = join()
    pods = [pod("a", 1024, {"app": "x"}), pod("b", 2048)]
    side = j.side(pods, {}, set())
    assert [c.devices[0].limit_bytes for c in j.containers(side, {})] == [1024 << 20, 2048 << 20]
    assert [f.kind for f in side.findings] == ["allocation_without_region"] * 2
    assert j.side(list(pods), {}, set()) is side  # the same objects, the same region set
    # the informer replaces b's object: its new allocation shows
    pods[1] = pod("b", 4096, {"app": "y"})
    side = j.side(pods, {}, set())
    assert [c.devices[0].limit_bytes for c in j.containers(side, {})] == [1024 << 20, 4096 << 20]
    assert [p.labels for p in side.pod_labels] == [(("label_app", "x"),), (("label_app", "y"),)]
    # a's region appears: its values come from it, its finding goes
    regions = {("a", "main"): snapshot(5)}
    side = j.side(pods, regions, set())
    views = j.containers(side, regions)
    assert [(c.started, c.devices[0].used_bytes) for c in views] == [(True, 5), (False, 0)]
    assert [f.subject for f in side.findings] == ["ns/p-b/main"]
    # b's region exists but cannot be read: no series, and the finding says so
    side = j.side(pods, regions, {("b", "main")})
    assert [c.pod for c in j.containers(side, regions)] == ["p-a"]
    assert [f.kind for f in side.findings] == ["region_unreadable"]


def test_views_follow_each_scrapes_snapshots() -> None:
    j = join()
    pods = [pod("a", 1024)]
    first = {("a", "main"): snapshot(5)}
    side = j.side(pods, first, set())
    before = j.containers(side, first)
    assert j.containers(side, first) == before
    second = {("a", "main"): snapshot(9)}  # another snapshot, the same key: the pod side is kept
    assert j.side(pods, second, set()) is side
    assert j.containers(side, second)[0].devices[0].used_bytes == 9
