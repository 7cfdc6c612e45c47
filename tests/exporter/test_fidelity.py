"""What the monitor's numbers mean: HAMi's raw utilisation sum, no fake idle containers, skip events."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hami.core.codec.pod_devices import decode_pod_devices, encode_pod_devices
from hami.core.devices import ContainerDevice
from hami.exporter.collector import MonitorCollector, Onsets
from hami.exporter.discovery import ContainerLister
from hami.exporter.region import reasons
from hami.testing.regions import RegionWriter

GPU0 = "GPU-00000000-1111-2222-3333-444444444444"


def _pod(uid: str, container: str, mem_mib: int = 1024) -> dict[str, object]:
    alloc = encode_pod_devices([[ContainerDevice(GPU0, "NVIDIA", mem_mib, 30)]])
    return {
        "metadata": {
            "uid": uid,
            "name": f"pod-{uid}",
            "namespace": "ns",
            "annotations": {"hami.io/vgpu-devices-allocated": alloc},
        },
        "spec": {"containers": [{"name": container}]},
        "status": {"phase": "Running"},
    }


def _region(hook: Path, dirname: str) -> RegionWriter:
    d = hook / "containers" / dirname
    d.mkdir(parents=True)
    w = RegionWriter.create(str(d / "0.cache"), "v1.2")
    w.initialise([GPU0], limits=[1 << 30], sm_limits=[50])
    return w


def _scrape(lister: ContainerLister, pods: list[dict[str, object]], collector: MonitorCollector | None = None
            ) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:  # fmt: skip
    lister.update({str(p["metadata"]["uid"]) for p in pods})  # type: ignore[index]
    c = collector or MonitorCollector("n1", lister, lambda: pods, decode_pod_devices)
    registry = CollectorRegistry()
    registry.register(c)
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _values(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
            ) -> list[float]:  # fmt: skip
    return [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]


def test_utilization_ratio_is_hamis_raw_sum_and_core_percent_is_clamped(tmp_path: Path) -> None:
    w = _region(tmp_path, "u1_main")
    for pid in (1, 2):
        w.set_sm_util(w.add_process(pid), 0, 70)
    s = _scrape(ContainerLister(str(tmp_path)), [_pod("u1", "main")])
    assert _values(s, "hami_container_device_utilization_ratio", pod="pod-u1") == [140.0]
    assert _values(s, "hami_vgpu_core_used_percent", pod="pod-u1") == [100.0]
    assert _values(s, "hami_monitor_regions_skipped", reason=reasons.SM_UTIL_OVER_100) == [1.0]


def test_an_unreadable_region_is_not_exported_as_an_idle_container(tmp_path: Path) -> None:
    _region(tmp_path, "u1_main")
    bad = tmp_path / "containers" / "u1_main" / "0.cache"
    data = bytearray(bad.read_bytes())
    data[0:4] = (12345).to_bytes(4, "little")  # bad magic: the region exists and cannot be read
    bad.write_bytes(bytes(data))
    (tmp_path / "containers" / "u2_main").mkdir(parents=True)  # no region yet: no CUDA call so far
    s = _scrape(ContainerLister(str(tmp_path)), [_pod("u1", "main"), _pod("u2", "main", 2048)])
    assert _values(s, "hami_vgpu_memory_limit_bytes", pod="pod-u1") == []
    assert _values(s, "hami_vgpu_processes", pod="pod-u1") == []
    # the container that has not started yet keeps HAMi's zero series with its allocated limit
    assert _values(s, "hami_vgpu_memory_limit_bytes", pod="pod-u2") == [2048 << 20]
    assert _values(s, "hami_vgpu_memory_used_bytes", pod="pod-u2") == [0.0]
    assert _values(s, "hami_monitor_regions", state="skipped") == [1.0]
    assert _values(s, "hami_monitor_regions_skipped", reason=reasons.BAD_MAGIC) == [1.0]


def test_a_region_that_stays_broken_counts_once(tmp_path: Path) -> None:
    w = _region(tmp_path, "u1_main")
    w.set_sm_util(w.add_process(1), 0, 70)
    w.set_sm_util(w.add_process(2), 0, 70)
    lister = ContainerLister(str(tmp_path))
    pods = [_pod("u1", "main")]
    collector = MonitorCollector("n1", lister, lambda: pods, decode_pod_devices)
    name = "hami_monitor_region_skips_total"
    for _ in range(3):
        s = _scrape(lister, pods, collector)
        assert _values(s, name, reason=reasons.SM_UTIL_OVER_100) == [1.0]
        assert _values(s, "hami_monitor_regions_skipped", reason=reasons.SM_UTIL_OVER_100) == [1.0]
    w.set_sm_util(1, 0, 10)  # recovers: nothing met now, nothing added
    s = _scrape(lister, pods, collector)
    assert _values(s, "hami_monitor_regions_skipped", reason=reasons.SM_UTIL_OVER_100) == [0.0]
    assert _values(s, name, reason=reasons.SM_UTIL_OVER_100) == [1.0]
    w.set_sm_util(1, 0, 70)  # breaks again: a second event
    s = _scrape(lister, pods, collector)
    assert _values(s, name, reason=reasons.SM_UTIL_OVER_100) == [2.0]


def test_onsets_are_per_region_and_reason() -> None:
    o = Onsets()
    assert sorted(o.update({"a": frozenset({"x"}), "b": frozenset({"x", "y"})})) == ["x", "x", "y"]
    assert o.update({"a": frozenset({"x"}), "b": frozenset({"x", "y"})}) == []
    assert o.update({"a": frozenset({"x", "z"})}) == ["z"]
    assert o.update({"b": frozenset({"x"})}) == ["x"]  # b came back after a pass without it
