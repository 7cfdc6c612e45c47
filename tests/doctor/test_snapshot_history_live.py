"""`hami-doctor snapshot --from-prometheus ... --kubeconfig`: what the history cannot say, the pods still
in the API say (their requests and filter annotations, whether the scheduler placed them); a pod holding
its cards when the history begins is not replayed; a lock seen held across a bind ends at the bind.
Debian's real Prometheus on a backfilled history, the API emulator beside it."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hami.core import annotations as ann
from hami.core.codec.handshake import REPORTED, Handshake, format_handshake
from hami.core.codec.pod_devices import encode_pod_devices
from hami.core.devices import ContainerDevice
from hami.core.snapshot import reader as snapread
from hami.core.snapshot import writer as snapwrite
from hami.doctor.main import main
from hami.testing import cluster, prometheus
from hami.testing.builders import limits, pod
from hami.testing.history import decision_event
from hami.testing.kubeapi import KubeAPIServer

pytestmark = pytest.mark.skipif(not prometheus.available(), reason="prometheus/promtool not installed")

MIB = 1 << 20
STEP = 60
END = (int(time.time()) // STEP) * STEP - STEP
START = END - 2 * 3600
SCH = 'job="hami-scheduler",instance="s:9395"'
GPU0, GPU1 = cluster.gpu_uuid(0, 0), cluster.gpu_uuid(0, 1)


def _series() -> list[tuple[str, float, int, int]]:
    """(series, value, first minute, last minute) of a 2 hour history on n1 (two A100s)."""
    out: list[tuple[str, float, int, int]] = []
    for i, uuid in enumerate((GPU0, GPU1)):
        card = f'{SCH},node="n1",device_uuid="{uuid}",device_index="{i}",device_type="{cluster.GPU_TYPE}"'
        out += [
            (f"hami_gpu_memory_limit_bytes{{{card}}}", cluster.GPU_MEM_MIB * MIB, 0, 120),
            (f"hami_gpu_split_limit{{{card}}}", 10, 0, 120),
            (f"hami_gpu_core_limit_ratio{{{card}}}", 100, 0, 120),
        ]
    held = (("seeded", GPU0, 4096, 0), ("typed", GPU1, 2048, 40), ("by-hand", GPU0, 1024, 50))
    for name, uuid, mib, first in held:
        who = f'{SCH},namespace="ns",node="n1",pod="{name}",container_index="0",device_uuid="{uuid}"'
        out += [
            (f"hami_vgpu_memory_allocated_bytes{{{who}}}", mib * MIB, first, 120),
            (f"hami_vgpu_core_allocated_ratio{{{who}}}", 0, first, 120),
        ]
    # a lock held all along: the bind at minute 40 ended it (it had expired), and took its own
    out.append((f'hami_scheduler_node_lock_held{{{SCH},node="n1"}}', 1, 0, 120))
    return out


@pytest.fixture(scope="module")
def prom_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("prom")
    data = work / "data"
    data.mkdir()
    prometheus.backfill_openmetrics(
        prometheus.openmetrics(prometheus.held(_series(), START, STEP)), data, work
    )
    with prometheus.PrometheusServer(data) as server:
        yield server.url


def _live(name: str, uuid: str, mib: int, annotations: dict[str, str]) -> dict[str, object]:
    alloc = encode_pod_devices([[ContainerDevice(uuid, ann.VENDOR_NVIDIA, mib, 0)]])
    return pod(
        {"name": "main", "resources": {"limits": limits(1, mib, None)}},
        name=name,
        namespace="ns",
        annotations={ann.POD_VGPU_NODE: "n1", ann.POD_DEVICES_ALLOCATED: alloc, **annotations},
        node_name="n1",
        scheduler=cluster.SCHEDULER_NAME,
        phase="Running",
    )


def test_history_completed_by_the_api(
    prom_url: str, kube_api: KubeAPIServer, kube_config_file: Path, tmp_path: Path
) -> None:
    now = datetime.fromtimestamp(END, UTC)
    kube_api.store.put(cluster.gpu_node("n1", 0, 2, format_handshake(Handshake(REPORTED, now)), "a100"))
    placed = str(START + 40 * STEP)
    typed = _live("typed", GPU1, 2048, {ann.POD_VGPU_TIME: placed, ann.POD_USE_GPUTYPE: "A100"})
    typed["metadata"]["creationTimestamp"] = snapwrite.format_time(START + 39 * STEP)  # type: ignore[index]
    typed = kube_api.store.put(typed)
    kube_api.store.put(_live("by-hand", GPU0, 1024, {}))  # spec.nodeName set at creation: no vgpu-time
    # the extender's event dates the filter within the minute the samples give
    kube_api.store.put(decision_event(typed, True, START + 40 * STEP - 30.25))
    out = tmp_path / "history.json"
    argv = ["snapshot", "--from-prometheus", prom_url, "--since", "2h", "--step", "1m", "-o", str(out),
            "--now", now.strftime("%Y-%m-%dT%H:%M:%SZ"), "--kubeconfig", str(kube_config_file)]  # fmt: skip
    assert main(argv, stdout=io.StringIO()) == 0
    snapshot = snapread.load_snapshot(out)
    pods = {p.name: p for p in snapshot.pods}  # typed: rebound below to its snapshot entry
    # placed before the history began, or by hand: held as recorded, not replayed
    assert pods["seeded"].scheduled is None and pods["by-hand"].scheduled is None
    # the scheduler's placement, with the filter annotation and the request only the API has
    typed = pods["typed"]
    assert typed.scheduled == START + 40 * STEP
    assert typed.first_attempt == pytest.approx(START + 40 * STEP - 30.25, abs=1e-5)
    assert pods["by-hand"].first_attempt is None
    assert typed.annotations == {ann.POD_USE_GPUTYPE: "A100"}
    assert [c.name for c in typed.containers] == ["main"]
    # the lock ends at the bind and the bind's own lock holds from the next step
    assert [(lk.since, lk.released) for lk in snapshot.locks] == [
        (START, START + 40 * STEP),
        (START + 41 * STEP, None),
    ]


FINE_END = END  # a second history (its own Prometheus), scraped every 15 s
FINE = 15


@pytest.fixture(scope="module")
def fine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """20 minutes scraped every 15 s; a pod placed 7m30s in."""
    card = f'{SCH},node="n1",device_uuid="{GPU0}",device_index="0",device_type="{cluster.GPU_TYPE}"'
    who = f'{SCH},namespace="ns",node="n1",pod="p",container_index="0",device_uuid="{GPU0}"'
    series = [
        (f"hami_gpu_memory_limit_bytes{{{card}}}", cluster.GPU_MEM_MIB * MIB, 0),
        (f"hami_gpu_split_limit{{{card}}}", 10, 0),
        (f'hami_scheduler_nodes{{{SCH},state="healthy"}}', 1, 0),
        (f"hami_vgpu_memory_allocated_bytes{{{who}}}", 1024 * MIB, 450),
        (f"hami_vgpu_core_allocated_ratio{{{who}}}", 0, 450),
    ]
    begin = FINE_END - 1200
    samples = [
        (name, float(value), float(t))
        for name, value, first in series
        for t in range(begin + first, FINE_END + 1, FINE)
    ]
    work = tmp_path_factory.mktemp("fine")
    data = work / "data"
    data.mkdir()
    prometheus.backfill_openmetrics(prometheus.openmetrics(samples), data, work)
    with prometheus.PrometheusServer(data) as server:
        yield server.url


def test_the_default_step_follows_the_scrape_interval(fine_url: str, tmp_path: Path) -> None:
    """Scraped every 15 s: the step is 16 s, so the pod's placement is known to 16 s (a minute step put
    it 30 s off, and pods minutes apart in one instant)."""
    out = tmp_path / "history.json"
    now = datetime.fromtimestamp(FINE_END, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    argv = ["snapshot", "--from-prometheus", fine_url, "--since", "20m", "-o", str(out), "--now", now]
    assert main(argv, stdout=io.StringIO()) == 0
    (placed,) = snapread.load_snapshot(out).pods
    assert 0 <= placed.created - (FINE_END - 1200 + 450) <= FINE + 1
