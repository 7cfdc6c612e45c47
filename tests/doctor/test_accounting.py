"""`hami-doctor pod --prometheus-url` on a running pod: its memory as HAMi-core and the driver account it,
and the "GPU not limited" walk on a node whose cards the driver limits."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from hami.core.codec.nodelock import parse_rfc3339
from hami.doctor.accounting import Reading, findings
from hami.testing import prometheus
from hami.testing.doctorcluster import NOW, hami_node, run_json, scheduler_pod
from hami.testing.kubeapi import KubeAPIServer
from tests.doctor.test_gpu_limit import GPU, node_files, running_pod

END = int(datetime.timestamp(parse_rfc3339(NOW)))
MIB = 1 << 20
GIB = 1 << 30
REGISTER = (
    f'[{{"id":"{GPU}","count":10,"devmem":32768,"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB",'
    '"health":true%s}]'
)
KEY = ("main", "0", GPU)


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
    node_files(tmp_path / "hook", region=False)
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
