"""`hami-tune defrag --snapshot` on the demo's seeded cluster: the fragmented L4 node's pending pod.

The cluster goes through the API emulator and `hami-doctor snapshot --kubeconfig`, as a user runs it,
then the plan comes from the scheduler's own filter.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from hami.core.snapshot import reader as snapread
from hami.doctor.main import main as doctor
from hami.testing import cluster
from hami.testing.kubeapi import KubeAPIServer
from hami.tune import drain
from hami.tune.main import main as tune

NOW = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)
L4_POD = f"scenarios/{cluster.FRAG_PENDING}"


@pytest.fixture
def demo_snapshot(kube_api: KubeAPIServer, kube_config_file: Path, tmp_path: Path) -> Path:
    for obj in cluster.objects(gpus=4, now=NOW, scenarios=True):
        obj["metadata"]["creationTimestamp"] = "2026-03-02T11:00:00Z"
        kube_api.store.put(obj)
    out = tmp_path / "demo.json"
    assert doctor(["snapshot", "-o", str(out), "--kubeconfig", str(kube_config_file)]) == 0
    return out


def test_the_l4_pod_is_not_said_to_fit_on_the_a100s(demo_snapshot: Path) -> None:
    plan = drain.plan(snapread.load_snapshot(demo_snapshot))
    assert L4_POD in plan.pending
    # sim-node's A100s have room for 4 GiB, but the pod asks for an L4 (nvidia.com/use-gputype).
    assert L4_POD not in [pod for pod, _ in plan.fit_now]


def test_the_plan_moves_the_fewest_pods_that_let_the_l4_pod_run(demo_snapshot: Path) -> None:
    plan = drain.plan(snapread.load_snapshot(demo_snapshot))
    (step,) = [s for s in plan.steps if L4_POD in s.serves]
    assert step.node == cluster.FRAG_NODE
    # One move frees enough of one L4: the smallest such pod, tts-1 (5 GiB, on an L4 with 1.5 GiB
    # free), and it fits on an A100 (it filters on no type).
    assert step.moves == [("ml-infer/tts-1", cluster.NODE)]
    # The pod larger than any card stays unserved, with the engine's reason; the pinned pod fits now.
    assert [pod for pod, _ in plan.unserved] == [f"scenarios/{cluster.PENDING}"]
    assert (f"scenarios/{cluster.PINNED}", cluster.LOCKED_NODE) in plan.fit_now


def test_defrag_command_prints_the_plan(demo_snapshot: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tune(["defrag", "--snapshot", str(demo_snapshot)]) == 3  # pending-gpu fits no card at all
    out = capsys.readouterr().out
    step = f"1. on {cluster.FRAG_NODE}, move 1 pod(s) (ml-infer/tts-1 -> {cluster.NODE}); then {L4_POD}"
    assert step in out
    assert f"no drain lets scenarios/{cluster.PENDING} run:" in out
    assert f"fits now: {L4_POD}" not in out


def test_a_bad_snapshot_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}", encoding="utf-8")
    assert tune(["defrag", "--snapshot", str(bad)]) == 2
    assert capsys.readouterr().err.startswith("hami-tune defrag: bad snapshot:")


def test_defrag_reads_the_cluster_itself(
    kube_api: KubeAPIServer, kube_config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for obj in cluster.objects(gpus=4, now=NOW, scenarios=True):
        obj["metadata"]["creationTimestamp"] = "2026-03-02T11:00:00Z"
        kube_api.store.put(obj)
    assert tune(["defrag", "--kubeconfig", str(kube_config_file)]) == 3
    step = f"1. on {cluster.FRAG_NODE}, move 1 pod(s) (ml-infer/tts-1 -> {cluster.NODE}); then {L4_POD}"
    assert step in capsys.readouterr().out


def test_an_unreachable_cluster_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tune(["defrag", "--kubeconfig", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hami-tune defrag: ") and len(err.strip().splitlines()) == 1, err
