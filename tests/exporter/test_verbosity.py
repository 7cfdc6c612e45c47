"""The monitor's log at -v=4 (what one collection and one rescan found: the tuning guide's first step
when monitor data is missing) and -v=5 (every GPU and container device, UUID by UUID), line by line."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from hami.testing.kubeapi import KubeAPIServer
from hami.testing.processes import Daemon, python_env
from hami.testing.regions import MEM_DATA, RegionWriter
from hami.testing.wait import wait_until

NODE = "node-1"
GPU0 = "GPU-00000000-1111-2222-3333-444444444444"
GPU1 = "GPU-11111111-1111-2222-3333-444444444444"
MIB = 1 << 20
KLOG = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ [\w.]+:\d+\] (.*)$")


def _pod(name: str, uid: str, allocated: str = "") -> dict[str, Any]:
    annotations = {"hami.io/vgpu-devices-allocated": allocated} if allocated else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "uid": uid, "annotations": annotations},
        "spec": {"nodeName": NODE, "containers": [{"name": "main"}]},
        "status": {"phase": "Running"},
    }


@pytest.fixture
def node(kube_api: KubeAPIServer, tmp_path: Path) -> Any:
    hook = tmp_path / "hook"
    ctr = hook / "containers" / "uid-run_main"
    ctr.mkdir(parents=True)
    (hook / "containers" / "uid-new_main").mkdir()  # allocated a moment ago: no region file yet
    writer = RegionWriter.create(str(ctr / "0b1c.cache"), "v1.2")
    writer.initialise([GPU0], limits=[4 << 30], sm_limits=[30])
    writer.change_memory(writer.add_process(10, 4010), 0, MEM_DATA, 512 * MIB)
    kube_api.store.put(_pod("trainer", "uid-run"))
    kube_api.store.put(_pod("waiting", "uid-new", f"{GPU1},NVIDIA,2048,25:;"))
    spec = tmp_path / "nvml.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "devices": [
                    {"uuid": GPU0, "name": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960},
                    {"uuid": GPU1, "name": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "temperature": 51},
                ]
            }
        )
    , encoding="utf-8")
    yield hook, spec
    writer.close()


def _run(level: int, hook: Path, spec: Path, kubeconfig: Path) -> list[str]:
    """Start the monitor at ``-v=level``, scrape once it has both pods, return its log messages."""
    env = python_env(NODE_NAME=NODE, HOOK_PATH=str(hook), HAMI_NVML="fake", HAMI_FAKE_NVML_SPEC=str(spec))
    argv = ["--kubeconfig", str(kubeconfig), "--metrics-bind-address", "127.0.0.1:0", f"-v={level}"]
    daemon = Daemon([sys.executable, "-m", "hami.exporter", *argv], env)
    try:
        url = daemon.wait_for_line(r"Serving metrics on (\S+)").group(1) + "/metrics"

        def both_pods() -> bool:
            return requests.get(url, timeout=10).text.count("hami_vgpu_memory_limit_bytes{") == 2

        wait_until(both_pods, 60, "both pods in a scrape")
    finally:
        assert daemon.stop() == 0, daemon.log()
    return [m.group(2) for m in map(KLOG.match, daemon.lines) if m]


def test_v4_says_what_each_collection_and_rescan_found(
    node: Any, kube_config_file: Path, tmp_path: Path
) -> None:
    hook, spec = node
    messages = _run(4, hook, spec, kube_config_file)
    assert "Starting to collect metrics for vGPUMonitor" in messages
    finished = [m for m in messages if m.startswith("Finished collecting metrics for vGPUMonitor")]
    assert re.fullmatch(
        r"Finished collecting metrics for vGPUMonitor: 2 container\(s\) \(1 without a region yet\), "
        r"2 host GPU\(s\), regions ok=1 initialising=1 skipped=0, 0 MIG allocation\(s\), in \d+\.\d ms",
        finished[-1],
    ), finished
    empty = hook / "containers" / "uid-new_main"
    assert f"Checking path {empty}" in messages and f"No cache file in {empty}" in messages
    rescan = r"Updated container list: 2 dir\(s\), 1 region\(s\) loaded, 0 removed; feedback wrote \d+ "
    rescan += r"value\(s\)"
    assert any(re.fullmatch(rescan, m) for m in messages)
    assert not [m for m in messages if m.startswith(("Container ", "GPU "))], "V5 lines at -v=4"


def test_v5_names_every_gpu_and_container_device(node: Any, kube_config_file: Path, tmp_path: Path) -> None:
    hook, spec = node
    messages = _run(5, hook, spec, kube_config_file)
    assert (
        f"Container team-a/trainer/main vdevice 0: uuid {GPU0}, used {512 * MIB} of {4 << 30} bytes, "
        "SM 0% of 30% (region)"
    ) in messages
    assert (
        f"Container team-a/waiting/main vdevice 0: uuid {GPU1}, used 0 of {2048 * MIB} bytes, SM 0% of 25% "
        "(allocation annotation, no region yet)"
    ) in messages
    assert (
        f"GPU 1 {GPU1} (NVIDIA A100-SXM4-40GB): memory used 0 of {40960 * MIB} bytes, utilization 0%, "
        "temperature 51 C"
    ) in messages


def test_default_verbosity_keeps_collection_details_out(
    node: Any, kube_config_file: Path, tmp_path: Path
) -> None:
    hook, spec = node
    messages = _run(0, hook, spec, kube_config_file)
    assert "Serving metrics on" in " ".join(messages)
    detail = ("Starting to collect", "Finished collecting", "Checking path", "Updated container", "Container")
    assert not [m for m in messages if m.startswith(detail)]
