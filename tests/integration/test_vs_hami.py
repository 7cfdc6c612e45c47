"""HAMi's own scheduler extender (built from ``$HAMI_SRC``) beside ours: the same cluster, the same pod
stream, every answer compared (``hami.testing.sidebyside``).

Skipped only when HAMi's source is absent (``hami.testing.hamipeer.ABSENT`` says how to point at it).
``VS_HAMI_PODS`` sets the stream's length (default 2,000)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from hami.testing import hamipeer, podstream, sidebyside
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.processes import ProcessGroup

SRC = hamipeer.source()
pytestmark = pytest.mark.skipif(SRC is None, reason=hamipeer.ABSENT)
PODS = int(os.environ.get("VS_HAMI_PODS", "2000"))
SEED = 29
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def hami_binary() -> Path:
    assert SRC is not None
    return hamipeer.build(SRC)


@pytest.fixture(scope="module")
def setup() -> hamipeer.ChartSetup:
    assert SRC is not None
    return hamipeer.chart_setup(SRC)


def _side(which: str, group: ProcessGroup, api: KubeAPIServer, setup: hamipeer.ChartSetup,
          binary: Path) -> sidebyside.Side:  # fmt: skip
    kubeconfig = group.log_dir / f"{which}-kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()))
    ext = hamipeer.start(which, group, kubeconfig, setup, binary=binary, verbosity=1,
                         extra_flags=["--kube-qps=-1"])  # fmt: skip
    return sidebyside.Side(which, api.url, ext.url, ext.metrics_url)


@pytest.fixture(scope="module")
def sides(
    hami_binary: Path, setup: hamipeer.ChartSetup, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[sidebyside.Side, sidebyside.Side]]:
    nodes = podstream.cluster_nodes(NOW)
    gpus = sum(s.gpus for s in podstream.CLUSTER)
    group = ProcessGroup(tmp_path_factory.mktemp("vs-hami"))
    with (
        KubeAPIServer() as hami_api, KubeAPIServer() as our_api,
        hamipeer.LeaseKeeper(hami_api.url), hamipeer.LeaseKeeper(our_api.url),
    ):  # fmt: skip
        try:
            pair = []
            for which, api in (("hami", hami_api), ("ours", our_api)):
                sidebyside.seed(api.url, nodes, [podstream.quota()])
                side = _side(which, group, api, setup, hami_binary)
                sidebyside.wait_ready(side, gpus, [podstream.QUOTA_NS])
                pair.append(side)
            yield pair[0], pair[1]
        finally:
            group.stop()


def test_same_pods_same_placements(sides: tuple[sidebyside.Side, sidebyside.Side]) -> None:
    hami, ours = sides
    steps = podstream.stream(SEED, PODS)
    nodes = [s.name for s in podstream.CLUSTER]
    report = sidebyside.run(hami, ours, nodes, steps)
    print(report.summary())
    assert report.pods == PODS
    assert report.placed > PODS // 4 and report.refused > PODS // 20, report.summary()
    # what differs is written down (docs/design/differences.md) or the test fails, naming it
    assert not report.unexplained, report.summary()
