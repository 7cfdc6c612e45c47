"""hami-doctor idle against Debian's real Prometheus, serving the monitor's series backfilled."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from hami.core.codec.nodelock import format_rfc3339
from hami.doctor.main import main
from hami.testing import prometheus
from hami.testing.processes import free_port

pytestmark = pytest.mark.skipif(not prometheus.available(), reason="prometheus/promtool not installed")

GIB = 1024**3
STEP = 60
END = (int(time.time()) // STEP) * STEP - STEP
START = END - 2 * 3600
NOW = format_rfc3339(datetime.fromtimestamp(END, UTC))


def _series() -> list[tuple[str, float, float]]:
    """(labels, seconds since the last kernel at END, vGPU memory limit) per container. ns1/train's
    containers last ran 2h and 5000 s ago; ns4/train (same pod name) and ns2/serve are busy."""
    return [
        ('node="n1",namespace="ns1",pod="train",container="c1"', 7200, 8 * GIB),
        ('node="n1",namespace="ns1",pod="train",container="c2"', 5000, 4 * GIB),
        ('node="n1",namespace="ns2",pod="serve",container="c1"', 30, 10 * GIB),
        ('node="n2",namespace="ns3",pod="notebook",container="c1"', 4000, 2 * GIB),
        ('node="n2",namespace="ns4",pod="train",container="c1"', 10, 16 * GIB),
    ]


def _samples() -> Iterator[tuple[str, float, float]]:
    for labels, elapsed, limit in _series():
        full = f'job="hami-monitor",instance="x:9394",{labels},vdevice_index="0",device_uuid="GPU-1"'
        for t in range(START, END + 1, STEP):
            # The notebook ran a short kernel burst 20 minutes ago that its SM sample caught.
            sm = 3.0 if "notebook" in labels and t == END - 1200 else 0.0
            yield f"hami_container_last_kernel_elapsed_seconds{{{full}}}", max(0.0, elapsed - (END - t)), t
            yield f"hami_vgpu_memory_limit_bytes{{{full}}}", limit, t
            yield f"hami_vgpu_core_used_percent{{{full}}}", sm, t


@pytest.fixture(scope="module")
def prom_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("prom")
    data = work / "data"
    data.mkdir()
    prometheus.backfill_openmetrics(prometheus.openmetrics(_samples()), data, work)
    with prometheus.PrometheusServer(data) as server:
        yield server.url


def _run(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["idle", "--now", NOW, *args], stdout=out)
    return code, out.getvalue()


def test_reclaim_table_most_memory_first(prom_url: str) -> None:
    code, text = _run("--prometheus-url", prom_url)
    assert code == 1
    assert "2 pods hold 14 GiB of vGPU memory and ran no kernel for 1h0m0s or more  (idle.pods)" in text
    rows = [line.split() for line in text.splitlines() if line.startswith("  ns")]
    since = lambda s: format_rfc3339(datetime.fromtimestamp(END - s, UTC))  # noqa: E731
    assert rows == [
        ["ns1", "train", "n1", "12", "GiB", since(5000), "1h23m20s", "0%"],
        ["ns3", "notebook", "n2", "2", "GiB", since(4000), "1h6m40s", "3%"],
    ]


def test_json_and_a_longer_threshold(prom_url: str) -> None:
    code, text = _run("--prometheus-url", prom_url, "--idle-for", "80m", "--json")
    assert code == 1
    (section,) = json.loads(text)["sections"]
    assert [row[:2] for row in section["tables"][0]["rows"]] == [["ns1", "train"]]
    code, text = _run("--prometheus-url", prom_url, "--idle-for", "2h")
    assert code == 0
    assert "no pod holds a vGPU without a kernel for 2h0m0s" in text


def test_no_monitor_series_is_a_warning_that_names_the_job(prom_url: str) -> None:
    code, text = _run("--prometheus-url", prom_url, "--monitor-job", "other")
    assert code == 1
    assert 'no hami_container_last_kernel_elapsed_seconds{job="other"}' in text


def test_prometheus_errors_and_bad_flags(prom_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("--prometheus-url", f"http://127.0.0.1:{free_port()}", "--timeout", "5")[0] == 4
    assert "cannot reach Prometheus" in capsys.readouterr().err
    # A job name that breaks the selector is Prometheus' 400, reported, not a traceback.
    assert _run("--prometheus-url", prom_url, "--monitor-job", 'a"b')[0] == 4
    assert "bad_data" in capsys.readouterr().err
    assert _run("--prometheus-url", prom_url, "--idle-for", "0s")[0] == 3
    assert "--idle-for must be positive" in capsys.readouterr().err
