"""`hami-doctor snapshot --from-prometheus`: a snapshot rebuilt from Debian's real Prometheus serving a
backfilled history of the extender's, device plugin's and monitor's series; then replayed."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami.core.codec.node_devices import decode_node_devices
from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.snapshot import model as snap
from hami.core.snapshot import reader as snapread
from hami.doctor.main import main
from hami.testing import prometheus
from hami.tune.main import main as tune

pytestmark = pytest.mark.skipif(not prometheus.available(), reason="prometheus/promtool not installed")

MIB = 1 << 20
STEP = 60
END = (int(time.time()) // STEP) * STEP - STEP
START = END - 3 * 3600
SCH = 'job="hami-scheduler",instance="s:9395"'
A100, T4 = "NVIDIA A100-SXM4-40GB", "NVIDIA Tesla T4"


def _card(node: str, uuid: str, index: int, model: str, mib: int) -> list[tuple[str, float, int, int]]:
    labels = (
        f'{SCH},node="{node}",device_uuid="{uuid}",device_index="{index}",device_type="{model}",zone="vGPU"'
    )
    return [
        (f"hami_gpu_memory_limit_bytes{{{labels}}}", mib * MIB, 0, 180),
        (f"hami_gpu_split_limit{{{labels}}}", 10, 0, 180),
        (f"hami_gpu_core_limit_ratio{{{labels}}}", 100, 0, 180),
    ]


def _held(
    ns: str, pod: str, node: str, cards: dict[str, tuple[int, int]], *, start: int, end: int
) -> list[tuple[str, float, int, int]]:
    out = []
    for uuid, (mib, cores) in cards.items():
        labels = f'{SCH},namespace="{ns}",node="{node}",pod="{pod}",container_index="0",device_uuid="{uuid}"'
        out += [
            (f"hami_vgpu_memory_allocated_bytes{{{labels}}}", mib * MIB, start, end),
            (f"hami_vgpu_core_allocated_ratio{{{labels}}}", cores, start, end),
        ]
    return out


def _series() -> list[tuple[str, float, int, int]]:
    """(series, value, first minute, last minute) of a 3 hour history."""
    plugin = 'job="hami-device-plugin",instance="{n}:9396",node="{n}"'
    return [
        *_card("n1", "GPU-a", 0, A100, 40960),
        *_card("n1", "GPU-b", 1, A100, 40960),
        *_card("n2", "GPU-c", 0, T4, 23040),
        (f"hami_device_memory_scaling{{{plugin.format(n='n1')}}}", 1.0, 0, 180),
        (f"hami_device_memory_scaling{{{plugin.format(n='n2')}}}", 1.5, 0, 180),
        # n2's device plugin runs --memory-enforcement driver
        (f'hami_device_memory_enforcement{{{plugin.format(n="n1")},enforcement="hami-core"}}', 1, 0, 180),
        (f'hami_device_memory_enforcement{{{plugin.format(n="n1")},enforcement="driver"}}', 0, 0, 180),
        (f'hami_device_memory_enforcement{{{plugin.format(n="n2")},enforcement="hami-core"}}', 0, 0, 180),
        (f'hami_device_memory_enforcement{{{plugin.format(n="n2")},enforcement="driver"}}', 1, 0, 180),
        *_held("a", "train", "n1", {"GPU-a": (8192, 30)}, start=10, end=70),
        *_held("a", "serve", "n1", {"GPU-b": (4096, 0)}, start=20, end=180),
        *_held("b", "pair", "n1", {"GPU-a": (2048, 10), "GPU-b": (2048, 10)}, start=30, end=40),
        *_held(
            "a", "train", "n2", {"GPU-c": (8192, 30)}, start=100, end=130
        ),  # the same name again, elsewhere
        (
            'hami_vgpu_memory_used_bytes{job="hami-monitor",namespace="a",pod="train",container="main",'
            'vdevice_index="0",device_uuid="GPU-a",node="n1"}',
            6 * 1024 * MIB,
            10,
            70,
        ),
        (f'hami_scheduler_node_lock_held{{{SCH},node="n2"}}', 1, 50, 56),
        # one sample: a bind, not a stuck lock
        (f'hami_scheduler_node_lock_held{{{SCH},node="n1"}}', 1, 80, 80),
        (f"hami_scheduler_node_lock_timeout_seconds{{{SCH}}}", 240, 0, 180),
    ]


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


def _minute(t: float | None) -> float | None:
    return None if t is None else (t - START) / STEP


def test_history_as_a_snapshot(prom_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "history.json"
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(END))
    argv = [
        "snapshot",
        "--from-prometheus",
        prom_url,
        "--since",
        "3h",
        "--step",
        "1m",
        "--now",
        now,
        "-o",
        str(out),
    ]
    assert main(argv, stdout=io.StringIO()) == 0
    s = snapread.load_snapshot(out)
    assert s.source == snap.SOURCE_PROMETHEUS and (s.start, s.taken) == (START, END)
    cards = {n.name: decode_node_devices(n.annotations["hami.io/node-nvidia-register"]) for n in s.nodes}
    assert {n: [(d.id, d.devmem, d.count, d.type) for d in devs] for n, devs in cards.items()} == {
        "n1": [("GPU-a", 40960, 10, A100), ("GPU-b", 40960, 10, A100)],
        "n2": [("GPU-c", 23040, 10, T4)],
    }
    assert {n.name: n.memory_scaling for n in s.nodes} == {"n1": 1.0, "n2": 1.5}
    # the driver's enforcement on n2's cards, so that a pod asking for it is replayed there only
    enforcement = {n: [d.enforcement for d in devs] for n, devs in cards.items()}
    assert enforcement == {"n1": ["", ""], "n2": ["driver"]}
    assert s.scheduler.node_lock_expire == 240  # from the extender's gauge
    pods = {(p.key, p.allocation.node if p.allocation else None): p for p in s.pods}
    assert set(pods) == {("a/train", "n1"), ("a/serve", "n1"), ("b/pair", "n1"), ("a/train", "n2")}
    # Times to the step; a pod is gone at its last sample plus one step; one still there never finished.
    timeline = {
        key: (_minute(p.created), _minute(p.scheduled), _minute(p.finished)) for key, p in pods.items()
    }
    assert timeline == {
        ("a/train", "n1"): (10, 10, 71),
        ("a/serve", "n1"): (20, 20, None),
        ("b/pair", "n1"): (30, 30, 41),
        ("a/train", "n2"): (100, 100, 131),
    }
    pair = pods[("b/pair", "n1")]
    # The request rebuilt from what it was given: one container, two cards of 2048 MiB and 10 cores.
    assert pair.containers[0].resources == {
        "limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "2048", "nvidia.com/gpucores": "10"}
    }
    assert pair.allocation is not None
    assert [[d.uuid for d in c] for c in decode_pod_devices(pair.allocation.devices) if c] == [
        ["GPU-a", "GPU-b"]
    ]
    assert pods[("a/train", "n1")].peak_memory_bytes == 6 * 1024 * MIB
    # Only the lock held across samples; released one step after its last sample.
    assert [(lk.node, _minute(lk.since), _minute(lk.released)) for lk in s.locks] == [("n2", 50, 57)]
    assert any("rebuilt from Prometheus" in note for note in s.notes)
    assert not any("deviceMemoryScaling" in note for note in s.notes)  # the plugin's gauge said it
    assert "snapshot: 2 nodes, 4 GPU pods (4 placed, 3 finished)" in capsys.readouterr().err
    # hami-tune replays it: the policy the history does not record is assumed, and says so.
    assert tune(["simulate", str(out), "--set", "deviceMemoryScaling=1"]) == 0
    report = capsys.readouterr().out
    assert "--node-scheduler-policy not given" in report and "2 nodes (3 cards), 4 GPU pods" in report


def test_a_window_in_the_past_is_read_at_its_end_not_at_the_clock(prom_url: str, tmp_path: Path) -> None:
    """``--now`` an hour into the history: every query answers for that moment. (Instant queries
    once ran at the clock's now: the window's start slid with it, and pods placed inside the window
    read as placed before it.)"""
    out = tmp_path / "past.json"
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(START + 60 * STEP))
    argv = ["snapshot", "--from-prometheus", prom_url, "--since", "55m", "--step", "1m", "--now", now]
    assert main([*argv, "-o", str(out)], stdout=io.StringIO()) == 0
    s = snapread.load_snapshot(out)
    assert (_minute(s.start), _minute(s.taken)) == (5, 60)
    timeline = {
        (p.key, p.allocation.node if p.allocation else None): (_minute(p.scheduled), _minute(p.finished))
        for p in s.pods
    }
    # a/train on n2 starts at minute 100: after this window
    assert timeline == {
        ("a/train", "n1"): (10, None),
        ("a/serve", "n1"): (20, None),
        ("b/pair", "n1"): (30, 41),
    }


def test_unreachable_prometheus_is_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{prometheus.free_port()}"
    argv = ["snapshot", "--from-prometheus", url, "--query-timeout", "3s", "-o", str(tmp_path / "s.json")]
    assert main(argv, stdout=io.StringIO()) == 4
    assert f"cannot reach Prometheus at {url}" in capsys.readouterr().err
