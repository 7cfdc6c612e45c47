"""The demo's GPU nodes with the driver's accounting (``--cgroup-root``), read by the monitor's own
collector: on driver-node, the container whose env came from a driver-mode Allocate is limited by the
driver and keeps HAMi-core's region (both sources); on sim-node, the container whose shim
under-reports shows the gap."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hami.core import annotations as ann
from hami.core.codec.node_devices import decode_node_devices
from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.devices import ENFORCE_DRIVER
from hami.core.hamicore import HostLayout
from hami.core.serve.families import Family
from hami.demo.simdriver import BYPASS
from hami.demo.simhost import PodDrivenNode
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.container_setup import build_container_allocation
from hami.exporter.collector import MonitorCollector
from hami.exporter.discovery import ContainerLister
from hami.exporter.driver import DriverReader
from hami.exporter.host import HostReader
from hami.exporter.reconcile import GRACE_OBSERVATIONS
from hami.scheduler.engine.decision import FilterConfig, filter_pod
from hami.scheduler.engine.device_config import NvidiaConfig
from hami.scheduler.engine.requests import pod_request
from hami.scheduler.engine.usage import UsageIndex
from hami.testing import cluster
from hami.testing.engineinputs import node_state
from hami.testing.kubelet import write_runtime_env
from hami.testing.simnode import MIB

NOW = datetime(2025, 6, 13, 9, 10, tzinfo=UTC)


def _uids(pods: list[dict[str, Any]], base: int) -> list[dict[str, Any]]:
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"00000000-0000-4000-8000-{base + i:012x}"
    return pods


def _by(fam: Family, *keys: str) -> dict[tuple[str, ...], float]:
    return {tuple(dict(zip(n, v, strict=True))[k] for k in keys): x for n, v, x in fam.rows}


def _scrape(
    tmp_path: Path, node_name: str, gpus: int, pods: list[dict[str, Any]], runtime: Path | None = None
) -> dict[str, Family]:
    """The node's families after a few simulation steps, once the reconciler's findings settled."""
    node = PodDrivenNode(
        str(tmp_path / "vgpu"), gpus, lambda: pods, str(tmp_path / "proc"),
        cgroup_root=str(tmp_path / "cgroup"), node=node_name,
        runtime_dir=None if runtime is None else str(runtime),
    )  # fmt: skip
    for _ in range(3):
        node.step()
    lister = ContainerLister(str(tmp_path / "vgpu"))
    lister.update(None)
    collector = MonitorCollector(
        node_name,
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
    return fams


def _allocate_in_driver_mode(pod: dict[str, Any]) -> dict[str, str]:
    """The container's env from the device plugin's Allocate, run in driver mode."""
    devs = decode_pod_devices(pod["metadata"]["annotations"][ann.POD_DEVICES_ALLOCATED])[0]
    got = build_container_allocation(
        tuple(devs),
        PluginConfig(memory_enforcement=ENFORCE_DRIVER),
        HostLayout("/usr/local"),
        pod_uid=pod["metadata"]["uid"],
        container=pod["spec"]["containers"][0],
        cache_id="c0ffee",
        lib_host_path="/usr/local/vgpu/libvgpu.so",
        license_present=False,
    )
    return dict(got.envs)


def test_the_scheduler_places_the_driver_limited_pod_on_driver_node_only() -> None:
    objs = cluster.objects(4, NOW, scenarios=True)
    register = {o["metadata"]["name"]: o["metadata"]["annotations"].get(ann.NODE_REGISTER) for o in objs}
    nodes = [
        node_state(o["metadata"]["name"], *decode_node_devices(register[o["metadata"]["name"]]))
        for o in objs
        if o["kind"] == "Node" and o["metadata"]["name"] in (cluster.NODE, cluster.DRIVER_NODE)
    ]
    request = pod_request(cluster.driver_limited_pod(), NvidiaConfig())
    assert request is not None
    result = filter_pod(request, nodes, UsageIndex(), None, FilterConfig())
    assert result.node == cluster.DRIVER_NODE
    assert result.failed[cluster.NODE].endswith("CardTypeMismatch")


def test_driver_node_limits_the_container_by_the_driver_and_keeps_hami_cores_region(tmp_path: Path) -> None:
    (pod,) = _uids([cluster._with_status(cluster.DRIVER_LIMITED)], 0x100)
    env = _allocate_in_driver_mode(pod)
    assert env["NVIDIA_GPU_MEMORY_LIMIT"] == str(cluster.DRIVER_LIMITED.mem_mib)
    assert not any(k.startswith("CUDA_DEVICE_MEMORY_LIMIT") for k in env)
    cid = pod["status"]["containerStatuses"][0]["containerID"].rpartition("://")[2]
    write_runtime_env(tmp_path / "runtime", cid, env)
    fams = _scrape(tmp_path, cluster.DRIVER_NODE, cluster.DRIVER_GPUS, [pod], tmp_path / "runtime")

    limit = cluster.DRIVER_LIMITED.mem_mib * MIB
    limits = _by(fams["hami_vgpu_source_memory_limit_bytes"], "pod", "source", "limit")
    assert limits == {
        (cluster.DRIVER_LIMITED.name, "hami-core", "hard"): 0,  # HAMi-core runs without a memory limit
        **{(cluster.DRIVER_LIMITED.name, s, k): limit for s in ("nvml", "dmem") for k in ("soft", "hard")},
    }
    used = _by(fams["hami_vgpu_source_memory_used_bytes"], "pod", "source")
    core = used[(cluster.DRIVER_LIMITED.name, "hami-core")]
    assert 0 < core <= limit  # its use stays within the driver's limit
    assert used[(cluster.DRIVER_LIMITED.name, "nvml")] == core == used[(cluster.DRIVER_LIMITED.name, "dmem")]
    assert set(_by(fams["hami_vgpu_memory_accounting_gap_bytes"], "pod").values()) == {0}
    assert fams["hami_vgpu_unlimited_processes"].rows == []
    assert _by(fams["hami_inconsistency"], "kind")[("allocation_without_region",)] == 0


def test_a_container_without_the_hooks_variables_is_not_driver_limited(tmp_path: Path) -> None:
    """The same pod on a node whose runtime gave it no NVIDIA_GPU_MEMORY_LIMIT: HAMi-core's limit."""
    (pod,) = _uids([cluster._with_status(cluster.DRIVER_LIMITED)], 0x100)
    fams = _scrape(tmp_path, cluster.DRIVER_NODE, cluster.DRIVER_GPUS, [pod], tmp_path / "runtime")
    limits = _by(fams["hami_vgpu_source_memory_limit_bytes"], "source", "limit")
    assert limits[("hami-core", "hard")] == cluster.DRIVER_LIMITED.mem_mib * MIB
    assert limits[("nvml", "hard")] == 0 == limits[("dmem", "hard")]


def test_sim_node_catches_the_shim_that_under_reports(tmp_path: Path) -> None:
    pods = _uids(
        [
            *(cluster.gpu_pod(p) for p in cluster.POD_SPECS),
            cluster.unlimited_pod(),
            cluster._with_status(cluster.SHIM_UNDERREPORTS),
        ],
        0,
    )
    fams = _scrape(tmp_path, cluster.NODE, 4, pods)
    gaps = _by(fams["hami_vgpu_memory_accounting_gap_bytes"], "pod", "source")
    assert (
        gaps[(cluster.SHIM_UNDERREPORTS.name, "nvml")]
        == BYPASS
        == gaps[(cluster.SHIM_UNDERREPORTS.name, "dmem")]
    )
    assert {v for (pod, _), v in gaps.items() if pod != cluster.SHIM_UNDERREPORTS.name} <= {0}
    assert set(_by(fams["hami_vgpu_unlimited_processes"], "pod")) == {(cluster.UNLIMITED.name,)}
    avail = _by(fams["hami_monitor_driver_source_available"], "source", "reason")
    assert avail == {("nvml", "available"): 1, ("dmem", "available"): 1}
    assert _by(fams["hami_inconsistency"], "kind")[("allocation_without_region",)] == 1  # the unlimited one
