"""HAMi's own scheduler extender (built from ``$HAMI_SRC``) beside ours: the same cluster, the same pod
stream, every answer compared (``hami.testing.sidebyside``).

Skipped only when HAMi's source is absent (``hami.testing.hamipeer.ABSENT`` says how to point at it).
``VS_HAMI_PODS`` sets the stream's length: 2,000 by default, the issue's floor; the run
docs/design/hami-comparison.md reports is this test's own."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hami.testing import apiside, hamipeer, metricdiff, podstream, sidebyside
from hami.testing.processes import ProcessGroup
from tests.integration import apicluster

SRC = hamipeer.source()
pytestmark = pytest.mark.skipif(SRC is None, reason=hamipeer.ABSENT)
PODS = int(os.environ.get("VS_HAMI_PODS", "2000"))
SEED = 29
NOW = datetime(2026, 1, 1, tzinfo=UTC)
GO_RUNTIME = ("go_", "process_", "promhttp_")
# Families whose difference docs/design/differences.md explains (its row, by name).
DOCUMENTED = {"hami_build_info": "`hami_build_info` labels"}


@pytest.fixture(scope="module")
def hami_binary() -> Path:
    assert SRC is not None
    return hamipeer.build(SRC)


@pytest.fixture(scope="module")
def setup() -> hamipeer.ChartSetup:
    assert SRC is not None
    return hamipeer.chart_setup(SRC)


@pytest.fixture(scope="module")
def sides(
    hami_binary: Path, setup: hamipeer.ChartSetup, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[apiside.Side, apiside.Side]]:
    """HAMi's extender and ours, each on its own API server (the real control plane where it is
    built) holding the same nodes and quota."""
    work = tmp_path_factory.mktemp("vs-hami")
    gpus = sum(s.gpus for s in podstream.CLUSTER)
    group = ProcessGroup(work / "logs")
    with contextlib.ExitStack() as stack:
        pair = []
        for which in ("hami", "ours"):
            api = stack.enter_context(apicluster.api_cluster(work / which))
            print(f"{which}: {api.kind} at {api.url}")
            apiside.seed(api.url, podstream.cluster_nodes(NOW), [podstream.quota()],
                            podstream.NAMESPACES, session=api.session)  # fmt: skip
            stack.enter_context(hamipeer.LeaseKeeper(api.url, session=api.session))
            ext = hamipeer.start(which, group, api.kubeconfig, setup, binary=hami_binary, verbosity=1,
                                 extra_flags=["--kube-qps=-1"])  # fmt: skip
            side = apiside.Side(which, api.url, ext.url, ext.metrics_url, api.session)
            apiside.wait_ready(side, gpus, [podstream.QUOTA_NS])
            pair.append(side)
        stack.callback(group.stop)
        yield pair[0], pair[1]


@pytest.mark.timeout(900)  # the stream's pace is the loaded machine's
def test_same_pods_same_placements(sides: tuple[apiside.Side, apiside.Side]) -> None:
    hami, ours = sides
    steps = podstream.stream(SEED, PODS)
    nodes = [s.name for s in podstream.CLUSTER]
    report = sidebyside.run(hami, ours, nodes, steps)
    print(report.summary())
    assert report.pods == PODS
    assert report.placed > PODS // 4 and report.refused > PODS // 20, report.summary()
    # what differs is written down (docs/design/differences.md) or the test fails, naming it
    assert not report.unexplained, report.summary()


def test_same_state_same_metrics(sides: tuple[apiside.Side, apiside.Side]) -> None:
    """After the stream above (identical clusters, the same reservations): every family HAMi's
    scheduler exports is in ours with its type, labels and values. Its Go runtime and process
    families (``go_``, ``process_``, ``promhttp_``) are a Go binary's, not HAMi's."""
    hami, ours = sides
    texts = [apiside.settled_metrics(side) for side in (hami, ours)]
    theirs = metricdiff.families(texts[0], lambda n: not n.startswith(GO_RUNTIME))
    mine = metricdiff.families(texts[1])
    rows = metricdiff.compare(theirs, mine)
    print(metricdiff.table(rows))
    assert len(rows) >= 8 and sum(len(f.samples) for f in theirs.values()) > 50
    differing = [r for r in rows if r.status != "same" and r.name not in DOCUMENTED]
    assert differing == [], metricdiff.table(differing)
