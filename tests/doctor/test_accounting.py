"""`hami-doctor pod --prometheus-url` on a running pod: its memory as HAMi-core and the driver account it,
and the "GPU not limited" walk on a node whose cards the driver limits."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from hami.core.codec.nodelock import parse_rfc3339
from hami.doctor.accounting import Reading, findings
from hami.testing import prometheus
from hami.testing.kubeapi import KubeAPIServer
from tests.doctor.doctorcluster import NOW, hami_node, run_json, scheduler_pod

END = int(datetime.timestamp(parse_rfc3339(NOW)))
MIB = 1 << 20
GIB = 1 << 30
GPU = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"
REGISTER = (
    f'[{{"id":"{GPU}","count":10,"devmem":32768,"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB",'
    '"health":true%s}]'
)
KEY = ("main", "0", GPU)


def running_pod() -> dict[str, Any]:
    """ml/trainer on gpu-node-01, one vGPU container ``main``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer",
            "namespace": "ml",
            "uid": "7c1e7f0a-3b2d-4c5e-8f90-a1b2c3d4e5f6",
            "annotations": {
                "hami.io/vgpu-node": "gpu-node-01",
                "hami.io/bind-phase": "success",
                "hami.io/vgpu-devices-allocated": f"{GPU},NVIDIA,4000,30:;",
            },
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "nodeName": "gpu-node-01",
            "containers": [
                {
                    "name": "main",
                    "image": "cuda",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


def hami_core_files(hook: Path) -> None:
    """HAMi-core's files on the node, without the container's region yet."""
    vgpu = hook / "vgpu"
    (vgpu / "containers" / "7c1e7f0a-3b2d-4c5e-8f90-a1b2c3d4e5f6_main").mkdir(parents=True)
    (vgpu / "libvgpu.so").write_bytes(b"\x7fELF")
    (vgpu / "ld.so.preload").write_text(f"{vgpu}/libvgpu.so\n", encoding="utf-8")


def test_findings_compare_the_sources() -> None:
    core = Reading(1 * GIB, 4 * GIB)
    agree = findings({KEY: {"hami-core": core, "nvml": Reading(1 * GIB + MIB, 0)}}, "hami-core", 512 * MIB)
    assert [f.code for f in agree] == ["accounting.agree"]
    assert agree[0].evidence == (
        "hami-core: used 1024 MiB, hard limit 4096 MiB",
        "nvml: used 1025 MiB, hard limit none",
    )
    under = findings({KEY: {"hami-core": core, "dmem": Reading(3 * GIB, 0)}}, "hami-core", 512 * MIB)
    assert [(f.code, f.severity) for f in under] == [("accounting.shim.under-reports", "warning")]
    assert "HAMi-core reports 1024 MiB, the driver accounts 3072 MiB" in under[0].summary
    unlimited = findings({KEY: {"nvml": Reading(GIB, 0)}}, "driver", 512 * MIB)
    assert [(f.code, f.severity) for f in unlimited] == [("accounting.driver.unlimited", "broken")]
    limited = findings({KEY: {"nvml": Reading(GIB, 4 * GIB)}}, "driver", 512 * MIB)
    assert [f.code for f in limited] == ["accounting.agree"]
    absent = findings({KEY: {"hami-core": core}}, "driver", 512 * MIB)
    assert [(f.code, f.severity) for f in absent] == [("accounting.driver.absent", "warning")]


@pytest.fixture(scope="module")
def prom_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not prometheus.available():
        pytest.skip("prometheus/promtool not installed")
    work = tmp_path_factory.mktemp("prom")
    data = work / "data"
    data.mkdir()
    ctr = (
        f'namespace="ml",pod="trainer",container="main",vdevice_index="0",device_uuid="{GPU}",'
        'node="gpu-node-01"'
    )
    series = [
        (f'hami_vgpu_source_memory_used_bytes{{{ctr},source="hami-core"}}', 1 * GIB),
        (f'hami_vgpu_source_memory_used_bytes{{{ctr},source="nvml"}}', 3 * GIB),
        (f'hami_vgpu_source_memory_limit_bytes{{{ctr},source="hami-core",limit="hard"}}', 4 * GIB),
        (f'hami_vgpu_source_memory_limit_bytes{{{ctr},source="nvml",limit="hard"}}', 0),
    ]
    samples = [
        (
            name.replace("{", '{job="hami-monitor",instance="x:9394",zone="vGPU",', 1),
            float(v),
            float(END - i * 60),
        )
        for name, v in series
        for i in range(5, -1, -1)
    ]
    prometheus.backfill_openmetrics(prometheus.openmetrics(samples), data, work)
    with prometheus.PrometheusServer(data) as server:
        yield server.url


@pytest.mark.parametrize("mode", ["hami-core", "driver"])
def test_pod_shows_both_numbers(
    mode: str, api: KubeAPIServer, kube_config_file: Path, tmp_path: Path, prom_url: str
) -> None:
    hami_core_files(tmp_path / "hook")
    extra = ',"memoryEnforcement":"driver"' if mode == "driver" else ""
    for obj in (scheduler_pod(), hami_node("gpu-node-01", register=REGISTER % extra), running_pod()):
        api.store.put(obj)
    code, doc = run_json(
        kube_config_file,
        "pod",
        "ml/trainer",
        "--hook-path",
        str(tmp_path / "hook"),
        "--prometheus-url",
        prom_url,
    )
    (limits,) = [s for s in doc["sections"] if s["title"] == "pod ml/trainer: GPU limits"]
    got = [(f["code"], f["severity"]) for f in limits["findings"]]
    if mode == "hami-core":
        assert got[-2:] == [
            ("gpulimit.region.missing", "warning"),
            ("accounting.shim.under-reports", "warning"),
        ]
        assert code == 1
    else:
        # the driver holds the memory limit: the walk says so, and that it holds none for this pod
        assert got[0] == ("gpulimit.memory.driver", "ok")
        assert got[-1] == ("accounting.driver.unlimited", "broken")
        assert code == 2
    last = limits["findings"][-1]
    assert last["evidence"] == [
        "hami-core: used 1024 MiB, hard limit 4096 MiB",
        "nvml: used 3072 MiB, hard limit none",
    ]
