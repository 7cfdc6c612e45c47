"""`python -m hami.exporter` against the Kubernetes API emulator: attribution on a live scrape."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from hami.testing import builders
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.processes import Daemon, python_env
from hami.testing.regions import MEM_DATA, RegionWriter
from hami.testing.wait import wait_until

NODE = "node-1"
GPU0 = "GPU-00000000-1111-2222-3333-444444444444"
GPU1 = "GPU-11111111-1111-2222-3333-444444444444"
MIB = 1 << 20


def team_pod(name: str, uid: str, node: str, allocated: str = "") -> dict[str, Any]:
    annotations = {"hami.io/vgpu-devices-allocated": allocated} if allocated else {}
    return builders.pod({"name": "main"}, name=name, namespace="team-a", uid=uid, annotations=annotations,
                        node_name=node, phase="Running")


def scrape_until(url: str, done: Callable[[dict[str, Any]], bool], timeout: float = 60.0) -> dict[str, Any]:
    """The scrape's families by name, once ``done`` holds for them."""

    def scraped() -> dict[str, Any] | None:
        fams = {f.name: f for f in text_string_to_metric_families(requests.get(url, timeout=10).text)}
        return fams if done(fams) else None

    return wait_until(scraped, timeout, f"a scrape of {url} as expected", interval=0.1)


def test_daemon_attributes_pods_from_the_api(kube_api: KubeAPIServer, kube_config_file: Path,
                                             tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    ctr = hook / "containers" / "uid-run_main"
    ctr.mkdir(parents=True)
    writer = RegionWriter.create(str(ctr / "0b1c.cache"), "v1.2")
    writer.initialise([GPU0], limits=[4 << 30], sm_limits=[30])
    writer.change_memory(writer.add_process(10, 4010), 0, MEM_DATA, 512 * MIB)
    kube_api.store.put(team_pod("trainer", "uid-run", NODE))
    # allocated on GPU1 (2 GiB, 25 % cores) but no CUDA call yet: no region, 0-valued series
    kube_api.store.put(team_pod("waiting", "uid-idle", NODE, f"{GPU1},NVIDIA,2048,25:;"))
    kube_api.store.put(team_pod("elsewhere", "uid-other", "node-2", f"{GPU1},NVIDIA,1024,10:;"))
    spec = tmp_path / "nvml.yaml"
    spec.write_text(yaml.safe_dump({"devices": [
        {"uuid": GPU0, "name": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960},
        {"uuid": GPU1, "name": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960},
    ]}), encoding="utf-8")
    env = python_env(NODE_NAME=NODE, HOOK_PATH=str(hook), HAMI_NVML="fake", HAMI_FAKE_NVML_SPEC=str(spec))
    args = ["--kubeconfig", str(kube_config_file), "--metrics-bind-address", "127.0.0.1:0"]
    daemon = Daemon([sys.executable, "-m", "hami.exporter", *args], env)
    try:
        url = daemon.wait_for_line(r"Serving metrics on (http://\S+)").group(1) + "/metrics"
        fams = scrape_until(url, lambda f: len(f["hami_vgpu_memory_limit_bytes"].samples) == 2)
        samples = fams["hami_vgpu_memory_limit_bytes"].samples
        limits = {(s.labels["pod"], s.labels["device_uuid"]): s for s in samples}
        assert set(limits) == {("trainer", GPU0), ("waiting", GPU1)}
        run = limits[("trainer", GPU0)]
        assert run.labels == {"namespace": "team-a", "pod": "trainer", "container": "main",
                              "vdevice_index": "0", "device_uuid": GPU0, "node": NODE, "zone": "vGPU"}
        assert run.value == 4 << 30
        assert limits[("waiting", GPU1)].value == 2048 * MIB

        def value(name: str, pod_name: str) -> float:
            (s,) = [s for s in fams[name].samples if s.labels["pod"] == pod_name]
            return float(s.value)

        assert value("hami_vgpu_memory_used_bytes", "trainer") == 512 * MIB
        assert value("hami_vgpu_memory_used_bytes", "waiting") == 0
        assert value("hami_vgpu_core_limit_percent", "waiting") == 25
        assert value("hami_vgpu_core_used_percent", "waiting") == 0
        assert value("hami_vgpu_processes", "waiting") == 0
        # served beside the exposition: the API client's and the informer's own metrics
        assert any(s.labels.get("method") == "GET" for s in fams["rest_client_requests"].samples)
        assert fams["hami_build_info"].samples[0].labels["component"] == "monitor"
        hosts = fams["hami_host_gpu_memory_total_bytes"].samples
        assert {s.labels["device_uuid"] for s in hosts} == {GPU0, GPU1}
        assert requests.get(url.replace("/metrics", "/readyz"), timeout=10).status_code == 200
        # the pod's deletion reaches the daemon through the watch: its idle series go away
        kube_api.store.remove("pods", "waiting", "team-a")
        fams = scrape_until(url, lambda f: len(f["hami_vgpu_memory_limit_bytes"].samples) == 1)
        assert [s.labels["pod"] for s in fams["hami_vgpu_memory_limit_bytes"].samples] == ["trainer"]
    finally:
        code = daemon.stop()
        writer.close()
    assert code == 0, "\n".join(daemon.lines)
