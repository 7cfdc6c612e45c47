"""The demo's GPU node with the driver's accounting (``--cgroup-root``), read by the monitor's own
collector: the driver-limited container is limited and not "unlimited", and the container whose shim
under-reports shows the gap."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.serve.families import Family
from hami.demo.simdriver import BYPASS
from hami.demo.simhost import DRIVER_USE, PodDrivenNode
from hami.exporter.collector import MonitorCollector
from hami.exporter.discovery import ContainerLister
from hami.exporter.driver import DriverReader
from hami.exporter.host import HostReader
from hami.exporter.reconcile import GRACE_OBSERVATIONS
from hami.testing import cluster
from hami.testing.simnode import MIB


def _pods() -> list[dict[str, Any]]:
    pods = [
        *(cluster.gpu_pod(p) for p in cluster.POD_SPECS),
        cluster.unlimited_pod(),
        cluster.driver_limited_pod(),
        cluster._with_status(cluster.SHIM_UNDERREPORTS),
    ]
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"00000000-0000-4000-8000-{i:012x}"
    return pods


def _by(fam: Family, *keys: str) -> dict[tuple[str, ...], float]:
    return {tuple(dict(zip(n, v, strict=True))[k] for k in keys): x for n, v, x in fam.rows}


def test_the_monitor_reads_the_simulated_drivers_accounting(tmp_path: Path) -> None:
    pods = _pods()
    node = PodDrivenNode(
        str(tmp_path / "vgpu"), 4, lambda: pods, str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cgroup")
    )
    for _ in range(3):
        node.step()
    lister = ContainerLister(str(tmp_path / "vgpu"))
    lister.update(None)
    collector = MonitorCollector(
        cluster.NODE,
        lister,
        lambda: pods,
        decode_pod_devices,
        proc_root=str(tmp_path / "proc"),
        driver=(driver := DriverReader(node.nvml, str(tmp_path / "cgroup"), lambda calls: None)),
    )
    collector.hosts = HostReader(node.nvml, collector.nvml_errors.add).read
    for _ in range(GRACE_OBSERVATIONS):  # a finding counts once it held for this many scrapes
        fams = {f.name: f for f in collector.families()}
    lister.close()
    driver.close()
    node.stop()

    limits = _by(fams["hami_vgpu_source_memory_limit_bytes"], "pod", "source", "limit")
    for source in ("nvml", "dmem"):
        assert limits[(cluster.DRIVER_LIMITED.name, source, "hard")] == 2048 * MIB
        assert limits[(cluster.DRIVER_LIMITED.name, source, "soft")] == 2048 * MIB
    used = _by(fams["hami_vgpu_source_memory_used_bytes"], "pod", "source")
    assert used[(cluster.DRIVER_LIMITED.name, "nvml")] == DRIVER_USE
    assert (cluster.DRIVER_LIMITED.name, "hami-core") not in used
    gaps = _by(fams["hami_vgpu_memory_accounting_gap_bytes"], "pod", "source")
    assert (
        gaps[(cluster.SHIM_UNDERREPORTS.name, "nvml")]
        == BYPASS
        == gaps[(cluster.SHIM_UNDERREPORTS.name, "dmem")]
    )
    assert {v for (pod, _), v in gaps.items() if pod != cluster.SHIM_UNDERREPORTS.name} <= {0}
    unlimited = _by(fams["hami_vgpu_unlimited_processes"], "pod")
    assert set(unlimited) == {(cluster.UNLIMITED.name,)}  # the driver-limited one is limited
    avail = _by(fams["hami_monitor_driver_source_available"], "source", "reason")
    assert avail == {("nvml", "available"): 1, ("dmem", "available"): 1}
    kinds = _by(fams["hami_inconsistency"], "kind")
    assert kinds[("allocation_without_region",)] == 1  # the unlimited one; the driver-limited needs none
