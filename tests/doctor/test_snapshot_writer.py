"""`hami-doctor snapshot`: the demo cluster through the official client, read-only, as a snapshot file."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hami.core import annotations as ann
from hami.core.snapshot import model as snap
from hami.core.snapshot import reader as snapread
from hami.doctor.main import main
from hami.testing import cluster
from hami.testing.builders import limits, resource_quota
from hami.testing.kubeapi import KubeAPIServer

NOW = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)


def _seed(api: KubeAPIServer) -> None:
    for obj in cluster.objects(gpus=4, now=NOW, scenarios=True):
        obj["metadata"]["creationTimestamp"] = "2026-03-02T11:00:00Z"
        api.store.put(obj)
    # A pod the scheduler placed (vgpu-time) and that has finished since.
    done = cluster.gpu_pod(cluster.GpuPod("batch", "done-0", 1, 4096, 10))
    done["metadata"]["creationTimestamp"] = "2026-03-02T11:10:00Z"
    done["metadata"]["annotations"][ann.POD_VGPU_TIME] = str(int((NOW - timedelta(minutes=49)).timestamp()))
    done["metadata"]["annotations"][ann.POD_NUMA_BIND] = "true"
    done["status"] = {
        "phase": "Succeeded",
        "containerStatuses": [
            {"name": "main", "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-03-02T11:40:00Z"}}}
        ],
    }
    api.store.put(done)
    # Not HAMi's: another scheduler's pod, and a pod asking for no GPU.
    other = cluster.pending_pod()
    other["metadata"] = {"name": "cpu-only", "namespace": "web"}
    other["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    api.store.put(other)
    foreign = cluster.pending_pod()
    foreign["metadata"] = {"name": "foreign", "namespace": "web"}
    foreign["spec"]["schedulerName"] = "default-scheduler"
    api.store.put(foreign)
    quota = resource_quota("ml-train", "gpu-quota", gpumem="65536")
    quota["spec"]["hard"]["pods"] = "10"
    api.store.put(quota)
    api.store.put(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"namespace": "web", "name": "cpu"},
            "spec": {"hard": {"limits.cpu": "10"}},
        }
    )
    # The scheduler's own pod says which policies it runs with.
    api.store.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "hami-scheduler-0",
                "namespace": "hami-system",
                "labels": {"app": "hami-scheduler"},
            },
            "spec": {
                "containers": [
                    {
                        "name": "extender",
                        "image": "hami",
                        "args": [
                            "--node-scheduler-policy=spread",
                            "--gpu-scheduler-policy",
                            "binpack",
                            "--node-lock-timeout=3m",
                        ],
                    }
                ]
            },
        }
    )


def _snapshot(kube_config_file: Path, tmp_path: Path, *args: str) -> tuple[int, snap.Snapshot | None, str]:
    out = tmp_path / "snap.json"
    stdout = io.StringIO()
    argv = [
        "snapshot",
        "-o",
        str(out),
        "--kubeconfig",
        str(kube_config_file),
        "--scheduler-tz",
        "UTC",
        "--now",
        "2026-03-02T12:00:00Z",
        *args,
    ]
    code = main(argv, stdout=stdout)
    return code, snapread.load_snapshot(out) if out.exists() else None, stdout.getvalue()


@pytest.fixture
def seeded(kube_api: KubeAPIServer) -> KubeAPIServer:
    _seed(kube_api)
    return kube_api


def test_the_demo_cluster_as_a_snapshot(
    seeded: KubeAPIServer, kube_config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, s, _ = _snapshot(kube_config_file, tmp_path)
    assert code == 0 and s is not None
    assert s.source == snap.SOURCE_API and s.taken == NOW.timestamp()
    names = [n.name for n in s.nodes]
    assert names == [
        cluster.DRIVER_NODE, cluster.FRAG_NODE, cluster.LOCKED_NODE, cluster.NODE, cluster.STALE_NODE
    ]
    sim = next(n for n in s.nodes if n.name == cluster.NODE)
    assert set(sim.annotations) == {ann.NODE_REGISTER, ann.NODE_HANDSHAKE}
    assert sim.allocatable_gpus == 40 and sim.schedulable
    # The crashed bind's lock on locked-node is recorded as held since it was taken.
    assert s.locks == (
        snap.Lock(cluster.LOCKED_NODE, (NOW - timedelta(minutes=10)).timestamp(), "scenarios/crashed-bind"),
    )
    pods = {p.key: p for p in s.pods}
    assert (
        "web/cpu-only" not in pods
        and "web/foreign" not in pods
        and "hami-system/hami-scheduler-0" not in pods
    )
    # The demo's running pods were placed by hand (no hami.io/vgpu-time): kept where they are.
    bert = pods["ml-train/bert-train-0"]
    assert bert.allocation is not None and bert.allocation.node == cluster.NODE and bert.scheduled is None
    assert bert.containers[0].resources["limits"] == limits(1, 8192, 50)
    assert pods["scenarios/pending-gpu"].allocation is None
    # the annotation that makes the filter fit by memory enforcement is kept for the replay
    limited = pods[f"scenarios/{cluster.DRIVER_LIMITED.name}"]
    assert limited.annotations == {ann.POD_MEMORY_ENFORCEMENT: "driver"} and limited.allocation is None
    done = pods["batch/done-0"]
    assert done.scheduled == (NOW - timedelta(minutes=49)).timestamp()
    assert done.finished == datetime(2026, 3, 2, 11, 40, tzinfo=UTC).timestamp()
    assert done.annotations == {ann.POD_NUMA_BIND: "true"}
    # Only the HAMi limits of a quota; a quota without any is left out.
    assert s.quotas == (snap.Quota("ml-train", "gpu-quota", {"limits.nvidia.com/gpumem": "65536"}),)
    # Policies and lock expiry from the scheduler pod's arguments.
    assert (s.scheduler.node_policy, s.scheduler.gpu_policy, s.scheduler.node_lock_expire) == (
        "spread",
        "binpack",
        180,
    )
    assert len(s.notes) == 1 and "deviceMemoryScaling not given" in s.notes[0]
    err = capsys.readouterr().err
    assert "snapshot: 5 nodes, 25 GPU pods (21 placed, 1 finished), 1 quotas, 1 held locks" in err
    assert "note: deviceMemoryScaling not given" in err
    # The doctor only read: a GET for every list, nothing else.
    assert {r.method for r in seeded.requests.records} == {"GET"}


def test_flags_and_the_device_config_win(
    seeded: KubeAPIServer, kube_config_file: Path, tmp_path: Path
) -> None:
    config = tmp_path / "device-config.yaml"
    config.write_text(
        "nvidia:\n  resourceMemoryName: nvidia.com/gpumem\n  deviceMemoryScaling: 1.5\n"
        "  deviceSplitCount: 10\n  defaultMemory: 1024\n"
    , encoding="utf-8")
    code, s, _ = _snapshot(
        kube_config_file,
        tmp_path,
        "--node-scheduler-policy",
        "binpack",
        "--device-config",
        str(config),
        "--device-memory-scaling",
        f"{cluster.STALE_NODE}=2",
        "--node-lock-timeout",
        "4m",
    )
    assert code == 0 and s is not None
    assert (s.scheduler.node_policy, s.scheduler.gpu_policy, s.scheduler.node_lock_expire) == (
        "binpack",
        "binpack",
        240,
    )
    assert s.scheduler.device_config == {"resourceMemoryName": "nvidia.com/gpumem", "defaultMemory": 1024}
    scaling = {n.name: n.memory_scaling for n in s.nodes}
    assert scaling == {
        **dict.fromkeys((cluster.DRIVER_NODE, cluster.FRAG_NODE, cluster.LOCKED_NODE, cluster.NODE), 1.5),
        cluster.STALE_NODE: 2.0,
    }
    assert s.notes == ()


def test_stdout_and_the_replay_read_the_same_file(
    seeded: KubeAPIServer, kube_config_file: Path, tmp_path: Path
) -> None:
    stdout = io.StringIO()
    argv = ["snapshot", "-o", "-", "--kubeconfig", str(kube_config_file), "--now", "2026-03-02T12:00:00Z"]
    assert main(argv, stdout=stdout) == 0
    s = snapread.loads(stdout.getvalue())
    assert len(s.pods) == 25  # the demo cluster's and the three of this module


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--device-memory-scaling", "lots"), "--device-memory-scaling 'lots': want FACTOR or NODE=FACTOR"),
        (("--device-config", "/nonexistent.yaml"), "--device-config /nonexistent.yaml: cannot read"),
        (("--since", "forever", "--from-prometheus", "http://127.0.0.1:1"), "a Prometheus duration"),
    ],
)
def test_bad_flags_are_usage_errors(
    seeded: KubeAPIServer,
    kube_config_file: Path,
    *,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    message: str,
) -> None:
    code = 0
    try:
        code, _, _ = _snapshot(kube_config_file, tmp_path, *args)
    except SystemExit as exc:  # argparse: a bad flag value
        code = int(exc.code or 0)
    assert code == 3
    assert message in capsys.readouterr().err


def test_an_unreachable_cluster_is_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    , encoding="utf-8")
    code = main(
        ["snapshot", "-o", str(tmp_path / "s.json"), "--kubeconfig", str(config), "--kube-timeout", "2"]
    )
    assert code == 4
    assert capsys.readouterr().err.startswith("hami-doctor: cannot read the cluster:")
    assert not (tmp_path / "s.json").exists()
