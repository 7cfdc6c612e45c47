"""hami-tune report against Debian's real Prometheus, serving the chargeback rules' series backfilled."""

from __future__ import annotations

import csv
import io
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hami.core.promapi import Sample
from hami.testing import prometheus
from hami.testing.processes import free_port
from hami.tune import chargeback
from hami.tune.main import main

pytestmark = pytest.mark.skipif(not prometheus.available(), reason="prometheus/promtool not installed")

GIB = 1024**3
STEP = 60
END = (int(time.time()) // STEP) * STEP - STEP
POINTS = 31  # the rules' series exist for the last 30 minutes: 31 evaluations, one a minute
HOURS = POINTS * STEP / 3600  # what a 1m step integrates them to
RULES = Path(__file__).resolve().parents[2] / "alerts" / "hami-rules.yaml"
A100 = 'device_type="NVIDIA-A100"'
T4 = 'device_type="Tesla-T4"'
CARD_A = f'node="n1",device_uuid="GPU-a",{A100}'
CARD_B = f'node="n2",device_uuid="GPU-b",{T4}'


def _series() -> list[tuple[str, float]]:
    """What hami-chargeback.rules records for: GPU-a, an A100 registered at 60 GiB (40 GiB physical)
    shared by ns1/p1 and ns2/p1 (same pod name); GPU-b, a 16 GiB T4 nobody holds."""
    pod = 'namespace="{}",pod="p1",' + A100
    out: list[tuple[str, float]] = []
    for policy, idle, cap, cap_a, mem, cores in (
        ("reserved", "unreserved", "schedulable", 60, (20, 10), (30, 20)),
        ("used", "unused", "physical", 40, (8, 4), (50, 10)),
    ):
        out += [
            (f"node_device:hami_gpu_memory_{cap}_bytes:max{{{CARD_A}}}", cap_a * GIB),
            (f"node_device:hami_gpu_memory_{cap}_bytes:max{{{CARD_B}}}", 16 * GIB),
            (f"node_device:hami_gpu_memory_{idle}_bytes:sum{{{CARD_A}}}", (cap_a - sum(mem)) * GIB),
            (f"node_device:hami_gpu_memory_{idle}_bytes:sum{{{CARD_B}}}", 16 * GIB),
            (f"node_device:hami_gpu_core_{idle}_percent:sum{{{CARD_A}}}", 100 - sum(cores)),
            (f"node_device:hami_gpu_core_{idle}_percent:sum{{{CARD_B}}}", 100),
        ]
        for ns, m, c in zip(("ns1", "ns2"), mem, cores, strict=True):
            out += [
                (f"namespace_pod:hami_gpu_memory_{policy}_bytes:sum{{{pod.format(ns)}}}", m * GIB),
                (f"namespace_pod:hami_gpu_core_{policy}_percent:sum{{{pod.format(ns)}}}", c),
            ]
    return out


@pytest.fixture(scope="module")
def prom_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("prom")
    data = work / "data"
    data.mkdir()
    samples = [
        (name, value, float(END - (POINTS - 1 - i) * STEP))
        for name, value in _series()
        for i in range(POINTS)
    ]
    prometheus.backfill_openmetrics(prometheus.openmetrics(samples), data, work)
    with prometheus.PrometheusServer(data) as server:
        yield server.url


def _report(
    capsys: pytest.CaptureFixture[str], url: str, *args: str
) -> dict[tuple[str, str, str], dict[str, str]]:
    assert main(["report", "--prometheus-url", url, "--time", str(END), "--format", "csv", *args]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    return {(r["namespace"], r["pod"], r["gpu_model"]): r for r in rows}


def test_csv_per_pod_and_idle_under_both_policies(prom_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _report(capsys, prom_url, "--since", "2h", "--price", "NVIDIA-A100=3.6")
    assert list(rows) == [
        ("(idle)", "", "NVIDIA-A100"),
        ("(idle)", "", "Tesla-T4"),
        ("ns1", "p1", "NVIDIA-A100"),
        ("ns2", "p1", "NVIDIA-A100"),
    ]
    p1 = rows["ns1", "p1", "NVIDIA-A100"]
    assert float(p1["reserved_memory_gib_hours"]) == pytest.approx(20 * HOURS)
    assert float(p1["used_memory_gib_hours"]) == pytest.approx(8 * HOURS)
    assert float(p1["reserved_core_card_hours"]) == pytest.approx(0.3 * HOURS)
    assert float(p1["used_core_card_hours"]) == pytest.approx(0.5 * HOURS)
    # Cost follows the memory share of the card: 20 of 60 GiB reserved, 8 of 40 GiB used.
    assert float(p1["reserved_cost"]) == pytest.approx(3.6 * HOURS * 20 / 60)
    assert float(p1["used_cost"]) == pytest.approx(3.6 * HOURS * 8 / 40)
    idle_a = rows["(idle)", "", "NVIDIA-A100"]
    assert float(idle_a["reserved_memory_gib_hours"]) == pytest.approx(30 * HOURS)
    assert float(idle_a["used_core_card_hours"]) == pytest.approx(0.4 * HOURS)
    # No price for the T4: its cost cells stay empty rather than read as free.
    assert rows["(idle)", "", "Tesla-T4"]["reserved_cost"] == ""


def test_tenants_and_idle_add_up_to_the_cards(prom_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _report(capsys, prom_url, "--since", "7d", "--price", "NVIDIA-A100=3.6", "--price", "Tesla-T4=1")
    for policy, card_a in (("reserved", 60), ("used", 40)):
        assert sum(float(r[f"{policy}_memory_gib_hours"]) for r in rows.values()) == pytest.approx(
            (card_a + 16) * HOURS
        )
        assert sum(float(r[f"{policy}_core_card_hours"]) for r in rows.values()) == pytest.approx(2 * HOURS)
        # Every card-hour is paid for once: by its tenants or as idle.
        assert sum(float(r[f"{policy}_cost"]) for r in rows.values()) == pytest.approx((3.6 + 1) * HOURS)


def test_text_table(prom_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--prometheus-url", prom_url, "--time", str(END)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == list(chargeback.COLUMNS)
    # 10 GiB reserved and 4 GiB used for 31 minutes; no price, so no cost cells.
    assert lines[-1].split()[:5] == ["ns2", "p1", "NVIDIA-A100", "5.166666667", "2.066666667"]
    assert len(lines[-1].split()) == 7


def test_window_without_the_rules_series(prom_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["report", "--prometheus-url", prom_url, "--time", str(END - 86400), "--since", "1h"])
    assert code == 3
    assert "load alerts/hami-rules.yaml" in capsys.readouterr().err


def test_unreachable_prometheus(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--prometheus-url", f"http://127.0.0.1:{free_port()}", "--timeout", "5"]) == 1
    assert "cannot reach Prometheus" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["NVIDIA-A100", "=3", "NVIDIA-A100=cheap", "NVIDIA-A100=-1", "A=nan"])
def test_bad_price_is_a_usage_error(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["report", "--prometheus-url", "http://127.0.0.1:1", "--price", bad])
    assert exc.value.code == 2
    assert "give MODEL=PRICE" in capsys.readouterr().err


def test_reads_only_series_the_rules_record() -> None:
    records = {
        rule["record"]
        for group in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
        if "record" in rule
    }
    asked: list[str] = []

    def query(expr: str) -> list[Sample]:
        asked.append(expr)
        return []

    chargeback.collect(query, "7d", 60, {"NVIDIA-A100": 1.0})
    read = {name for expr in asked for name in re.findall(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", expr)}
    assert read and read <= records, read - records
