"""`hami-doctor node(s) --prometheus-url`: the monitor's reconciler findings beside the node's checks."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from hami.core.codec.nodelock import parse_rfc3339
from hami.testing import prometheus
from hami.testing.kubeapi import KubeAPIServer
from tests.doctor.doctorcluster import NOW, codes, hami_node, run_json

pytestmark = pytest.mark.skipif(not prometheus.available(), reason="prometheus/promtool not installed")

END = int(datetime.timestamp(parse_rfc3339(NOW)))


@pytest.fixture(scope="module")
def prom_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("prom")
    data = work / "data"
    data.mkdir()
    series = [
        ('node="n1",kind="memory_outside_hami"', 1.0),
        ('node="n1",kind="allocation_without_region"', 2.0),
        ('node="n1",kind="region_without_pod"', 0.0),
        ('node="n2",kind="memory_outside_hami"', 0.0),
    ]
    samples = [
        (
            f'hami_inconsistency{{job="hami-monitor",instance="x:9394",zone="vGPU",{labels}}}',
            v,
            float(END - i * 60),
        )
        for labels, v in series
        for i in range(5, -1, -1)
    ]
    prometheus.backfill_openmetrics(prometheus.openmetrics(samples), data, work)
    with prometheus.PrometheusServer(data) as server:
        yield server.url


def test_node_shows_the_monitors_findings(api: KubeAPIServer, kube_config_file: Path, prom_url: str) -> None:
    api.store.put(hami_node("n1"))
    api.store.put(hami_node("n2"))
    code, doc = run_json(kube_config_file, "nodes", "--prometheus-url", prom_url)
    by_node = {s["title"]: codes({"sections": [s]}) for s in doc["sections"]}
    n1 = next(v for k, v in by_node.items() if "n1" in k)
    n2 = next(v for k, v in by_node.items() if "n2" in k)
    assert {"node.truth.allocation_without_region", "node.truth.memory_outside_hami"} <= set(n1)
    assert not any(c.startswith("node.truth.") for c in n2)
    assert code == 1  # warnings
    summaries = [f["summary"] for s in doc["sections"] for f in s["findings"]]
    assert "2 container(s) hold a vGPU allocation but have no HAMi-core region" in summaries


def test_without_prometheus_nothing_changes(api: KubeAPIServer, kube_config_file: Path) -> None:
    api.store.put(hami_node("n1"))
    code, doc = run_json(kube_config_file, "node", "n1")
    assert code == 0
    assert not any(c.startswith("node.truth.") for c in codes(doc))
