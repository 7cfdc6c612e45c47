"""Golden exposition for fixed regions, pods and a fake NVML node (HAMI_UPDATE_GOLDEN=1 rewrites)."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.nvml.fake import FakeNvml
from hami.exporter.collector import MonitorCollector
from hami.exporter.discovery import ContainerLister
from hami.exporter.host import HostReader
from hami.testing import builders
from hami.testing.regions import MEM_CONTEXT, MEM_DATA, MEM_MODULE, RegionWriter

GOLDEN = Path(__file__).parent / "golden"
NOW = 1_800_000_000.0
GPU0 = "GPU-00000000-1111-2222-3333-444444444444"
GPU1 = "GPU-11111111-1111-2222-3333-444444444444"
NVML_SPEC = {
    "devices": [
        {
            "uuid": GPU0,
            "name": "Tesla V100-PCIE-32GB",
            "memory_mib": 32768,
            "memory_used_mib": 3000,
            "utilization": {"gpu": 40, "memory": 10},
            "temperature": 55,
            "power_mw": 123500,
            "ecc": {"corrected": 2, "uncorrected": 0},
            # a Volta card retires pages and has no row remapper
            "retired_pages": {"single_bit": 1, "double_bit": 0, "pending": False},
            "unsupported": ["nvmlDeviceGetRemappedRows"],
            "clock_event_reasons": 0x1 | 0x4,  # idle, software power cap
        },
        {
            "uuid": GPU1,
            "name": "NVIDIA A100-SXM4-40GB",
            "memory_mib": 40960,
            "unsupported": ["nvmlDeviceGetPowerUsage", "nvmlDeviceGetRetiredPages"],
            "temperature_thresholds": {"slowdown": 88, "shutdown": 93},
            "remapped_rows": {"correctable": 3, "uncorrectable": 1, "pending": True, "failure": False},
            "mig": {
                "enabled": True,
                "instances": [
                    {
                        "uuid": "MIG-aaaaaaaa-1111-2222-3333-444444444444",
                        "profile": "1g.5gb",
                        "gpu_instance_id": 7,
                        "compute_instance_id": 0,
                        "memory_mib": 4864,
                    }
                ],
            },
        },
    ]
}


def running_pod(
    uid: str,
    name: str,
    containers: list[str],
    *,
    allocated: str = "",
    labels: dict[str, str] | None = None,
    init: list[str] | None = None,
) -> dict[str, object]:
    return builders.pod(
        *({"name": c} for c in containers),
        init=[{"name": c} for c in init or []],
        name=name,
        namespace="team-a",
        uid=uid,
        annotations={"hami.io/vgpu-devices-allocated": allocated} if allocated else {},
        labels=labels,
        phase="Running",
    )


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[ContainerLister, list[dict[str, object]], FakeNvml]]:
    writers = []

    def region(
        dirname: str, version: str, uuids: list[str | bytes], limits: list[int], sm: list[int]
    ) -> RegionWriter:
        d = tmp_path / "containers" / dirname
        d.mkdir(parents=True)
        (d / "libvgpu.so").write_bytes(b"")
        w = RegionWriter.create(str(d / "0b1c.cache"), version)
        w.initialise(uuids, limits=limits, sm_limits=sm)
        writers.append(w)
        return w

    a = region("uid-a_train", "v1.2", [GPU0, GPU1], [4 << 30, 4 << 30], [30, 0])
    s = a.add_process(11, 4011)
    a.change_memory(s, 0, MEM_CONTEXT, 300 << 20)
    a.change_memory(s, 0, MEM_MODULE, 20 << 20)
    a.change_memory(s, 0, MEM_DATA, 1 << 30)
    a.set_sm_util(s, 0, 25)
    a.launch_kernel(int(NOW) - 7)
    b = region("uid-b_infer", "v0", [GPU0], [2 << 30], [50])
    b.change_memory(b.add_process(12), 0, MEM_DATA, 512 << 20)
    region("uid-b_sidecar", "v1.1", [b"\xff"], [1 << 30], [0])  # bad uuid: device skipped
    (tmp_path / "containers" / "uid-gone_main").mkdir()  # no pod: not exported
    pods = [
        running_pod("uid-a", "trainer", ["train"], labels={"app": "trainer", "team": "a"}),
        running_pod("uid-b", "server", ["infer", "sidecar"]),
        running_pod(
            "uid-c", "waiting", ["main"], init=["setup"], allocated=f";{GPU1},NVIDIA,2048,25:;"
        ),  # allocated, CUDA not started yet
    ]
    lister = ContainerLister(str(tmp_path))
    lister.update(None)
    nvml = FakeNvml(NVML_SPEC)
    yield lister, pods, nvml
    lister.close()
    for w in writers:
        w.close()


@pytest.mark.parametrize("legacy", [False, True])
def test_golden_exposition(
    node: tuple[ContainerLister, list[dict[str, object]], FakeNvml], legacy: bool
) -> None:
    lister, pods, nvml = node
    collector = MonitorCollector(
        "node-1",
        lister,
        lambda: pods,
        decode_pod_devices,
        legacy=legacy,
        labels_allowlist=["app"],
        clock=lambda: NOW,
    )
    collector.hosts = HostReader(nvml, collector.nvml_errors.add).read
    nvml.fail("nvmlDeviceGetTemperature", device=1)
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    path = GOLDEN / ("monitor_legacy.prom" if legacy else "monitor.prom")
    if os.environ.get("HAMI_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")
    # the rendered path of a twin, cold then with its caches warm, writes the same bytes, scrape by scrape
    twin = MonitorCollector(
        "node-1", lister, lambda: pods, decode_pod_devices, legacy=legacy, labels_allowlist=["app"],
        clock=lambda: NOW,
    )
    twin.hosts = HostReader(nvml, twin.nvml_errors.add).read
    assert b"".join(twin.render(openmetrics=False)).decode() == text
    assert b"".join(twin.render(openmetrics=False)) == generate_latest(registry)
