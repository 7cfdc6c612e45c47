"""`python -m hami.exporter` against the Kubernetes API emulator: attribution on a live scrape."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from hami.testing.kubeapi import KubeAPIServer
from hami.testing.regions import MEM_DATA, RegionWriter

NODE = "node-1"
GPU0 = "GPU-00000000-1111-2222-3333-444444444444"
GPU1 = "GPU-11111111-1111-2222-3333-444444444444"
MIB = 1 << 20


def pod(name: str, uid: str, node: str, allocated: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": uid,
            "annotations": {"hami.io/vgpu-devices-allocated": allocated} if allocated else {},
        },
        "spec": {"nodeName": node, "containers": [{"name": "main"}]},
        "status": {"phase": "Running"},
    }


class Daemon:
    """The monitor as a subprocess; its stderr is drained by a thread and searchable."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hami.exporter", *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for_line(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                m = re.search(pattern, line)
                if m:
                    return m
            assert self.proc.poll() is None, "\n".join(self.lines)
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r}:\n" + "\n".join(self.lines))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
            self._reader.join(10)


def scrape_until(url: str, done: Any, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        fams = {f.name: f for f in text_string_to_metric_families(requests.get(url, timeout=10).text)}
        if done(fams) or time.monotonic() > deadline:
            return fams
        time.sleep(0.1)


def test_daemon_attributes_pods_from_the_api(kube_api: KubeAPIServer, kube_config_file: Path,
                                             tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    ctr = hook / "containers" / "uid-run_main"
    ctr.mkdir(parents=True)
    writer = RegionWriter.create(str(ctr / "0b1c.cache"), "v1.2")
    writer.initialise([GPU0], limits=[4 << 30], sm_limits=[30])
    writer.change_memory(writer.add_process(10, 4010), 0, MEM_DATA, 512 * MIB)
    kube_api.store.put(pod("trainer", "uid-run", NODE))
    # allocated on GPU1 (2 GiB, 25 % cores) but no CUDA call yet: no region, 0-valued series
    kube_api.store.put(pod("waiting", "uid-idle", NODE, f"{GPU1},NVIDIA,2048,25:;"))
    kube_api.store.put(pod("elsewhere", "uid-other", "node-2", f"{GPU1},NVIDIA,1024,10:;"))
    spec = tmp_path / "nvml.yaml"
    spec.write_text(yaml.safe_dump({"devices": [
        {"uuid": GPU0, "name": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960},
        {"uuid": GPU1, "name": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960},
    ]}))
    env = {**os.environ, "NODE_NAME": NODE, "HOOK_PATH": str(hook), "HAMI_NVML": "fake",
           "HAMI_FAKE_NVML_SPEC": str(spec), "PYTHONPATH": os.pathsep.join(sys.path)}
    daemon = Daemon(["--kubeconfig", str(kube_config_file), "--metrics-bind-address", "127.0.0.1:0"], env)
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
