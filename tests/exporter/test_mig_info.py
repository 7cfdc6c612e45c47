"""hami_mig_device_info from the hami.io/vgpu-mig-allocations annotation (§B.4).

Section signs (§) refer to docs/design/node-agent-monitor.md.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hami.core.codec.mig import encode_mig_allocations
from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.devices import MigAllocation, MigPlacement
from hami.exporter.collector import MonitorCollector
from hami.exporter.discovery import ContainerLister
from hami.testing import builders

GPU = "GPU-11111111-1111-2222-3333-444444444444"
MIG = "MIG-aaaaaaaa-1111-2222-3333-444444444444"


def mig_pod(name: str, mig: str, *, init: tuple[str, ...] = (), phase: str = "Running") -> dict[str, object]:
    return builders.pod({"name": "main"}, init=[{"name": c} for c in init], name=name, namespace="ml",
                        uid=f"uid-{name}", annotations={"hami.io/vgpu-mig-allocations": mig}, phase=phase)


def alloc(container: int, device: int, *, identity: bool = True, gi: int = 3) -> MigAllocation:
    return MigAllocation(
        container, device, GPU, "1g.5gb", MigPlacement(gi, 1),
        mig_uuid=f"{MIG}-{device}" if identity else "",
        gpu_instance_id=gi if identity else None, compute_instance_id=0 if identity else None,
    )


@pytest.mark.parametrize("legacy", [False, True])
def test_mig_series_from_the_annotation(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                        legacy: bool) -> None:
    (tmp_path / "containers").mkdir()
    pods = [
        # init container first: containerIndex 1 is "main"; the second device is not created yet
        mig_pod("a", encode_mig_allocations([alloc(1, 0), alloc(1, 1, identity=False)]), init=("setup",)),
        mig_pod("b", encode_mig_allocations([alloc(3, 0)])),  # index past the containers
        mig_pod("c", '[{"containerIndex": "x"}]'),  # does not decode
        mig_pod("d", encode_mig_allocations([alloc(0, 0)]), phase="Succeeded"),
    ]
    lister = ContainerLister(str(tmp_path))
    lister.update(None)
    collector = MonitorCollector("node-1", lister, lambda: pods, decode_pod_devices, legacy=legacy)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):  # warnings are logged once, not per scrape
            body = b"".join(collector.render(False)).decode()
    fams = {f.name: f for f in text_string_to_metric_families(body)}
    (sample,) = fams["hami_mig_device_info"].samples
    assert sample.labels == {
        "namespace": "ml", "pod": "a", "container": "main", "vdevice_index": "0", "device_uuid": GPU,
        "node": "node-1", "zone": "vGPU", "mig_uuid": f"{MIG}-0", "profile": "1g.5gb",
        "gpu_instance_id": "3", "compute_instance_id": "0",
    }
    assert sample.value == 1
    if legacy:
        (old,) = fams["MigInfo"].samples
        assert old.labels == {"podnamespace": "ml", "podname": "a", "ctrname": "main", "vdeviceid": "0",
                              "deviceuuid": GPU, "instanceid": "3", "zone": "vGPU"}
    else:
        assert "MigInfo" not in fams
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("ml/b: MIG allocation containerIndex 3 out of range" in w for w in warnings) == 1
    assert sum("ml/c: failed to decode hami.io/vgpu-mig-allocations" in w for w in warnings) == 1
    lister.close()


def test_no_mig_family_without_allocations(tmp_path: Path) -> None:
    (tmp_path / "containers").mkdir()
    lister = ContainerLister(str(tmp_path))
    lister.update(None)
    collector = MonitorCollector("node-1", lister, lambda: [], decode_pod_devices)
    assert b"hami_mig_device_info" not in b"".join(collector.render(False))
    lister.close()
