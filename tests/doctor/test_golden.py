"""What an operator sees: text reports compared with tests/doctor/golden/*.txt.

Regenerate after an intended change with HAMI_DOCTOR_GOLDEN=update and review the diff.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from hami.testing import cluster
from hami.testing.builders import event
from hami.testing.extender import filter_pod, running
from hami.testing.kubeapi import KubeAPIServer
from tests.doctor.doctorcluster import NOW, OLD_HANDSHAKE, hami_node, hami_pod, run_doctor, scheduler_pod

GOLDEN = Path(__file__).parent / "golden"


def _check(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("HAMI_DOCTOR_GOLDEN") == "update":
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_golden_pod_filtering_failed(api: KubeAPIServer, kube_config_file: Path) -> None:
    for obj in (
        scheduler_pod(),
        hami_node("gpu-node-01"),
        hami_node("gpu-node-02"),
        hami_pod("train-1", "ml"),
        event(
            "train-1",
            "FilteringFailed",
            "2 nodes CardInsufficientMemory(gpu-node-01,gpu-node-02)",
            namespace="ml",
            count=4,
        ),
        event(
            "train-1", "FilteringFailed", "no available node, 2 nodes do not meet", namespace="ml", count=4
        ),
    ):
        api.store.put(obj)
    code, out = run_doctor(kube_config_file, "pod", "ml/train-1")
    assert code == 2
    _check("pod_filtering_failed.txt", out)


def test_golden_pod_stuck_bind(api: KubeAPIServer, kube_config_file: Path) -> None:
    for obj in (
        scheduler_pod(),
        hami_node("gpu-node-01", lock="2025-06-13T09:00:00Z,ml,train-2"),
        hami_pod(
            "train-2",
            "ml",
            node_name="gpu-node-01",
            annotations={
                "hami.io/bind-phase": "allocating",
                "hami.io/bind-time": "1749805200",
                "hami.io/vgpu-node": "gpu-node-01",
            },
        ),
    ):
        api.store.put(obj)
    code, out = run_doctor(kube_config_file, "pod", "ml/train-2")
    assert code == 2
    _check("pod_stuck_bind.txt", out)


def test_golden_nodes(api: KubeAPIServer, kube_config_file: Path) -> None:
    for obj in (
        hami_node("gpu-node-01"),
        hami_node("gpu-node-02", handshake=OLD_HANDSHAKE, gpus=0, lock="2025-06-13T09:09:40Z,ml,gone"),
        hami_node("cpu-node-01", register=None, handshake=None, gpus=0),
    ):
        api.store.put(obj)
    code, out = run_doctor(kube_config_file, "nodes")
    assert code == 2
    _check("nodes.txt", out)


def test_golden_logs() -> None:
    log = (
        "I0211 10:30:15.123456  1  filter.go:125] Filtering node gpu-node-01 for pod test-pod\n"
        "I0211 10:30:15.123789  1  filter.go:150] Node gpu-node-01 filtered out: CardInsufficientMemory, "
        "requested 8192Mi but available 4096Mi\n"
        'E0211 10:30:16.000001  1  register.go:80] patch node error nodes "gpu-node-01" is forbidden\n'
        "W0211 10:30:16.000002  1  register.go:81] Retrying in 5s seconds...\n"
        'E0211 10:30:21.000001  1  register.go:80] patch node error nodes "gpu-node-01" is forbidden\n'
        "I0211 10:30:51.000001  1  register.go:90] Successfully registered annotation. "
        "Next check in 30s seconds...\n"
    )
    code, out = run_doctor(None, "logs", "-", stdin=log)
    assert code == 2
    _check("logs.txt", out)


def test_golden_demo_pending_pod(kube_api: KubeAPIServer, kube_config_file: Path) -> None:
    """`hami-doctor pod scenarios/pending-gpu --scheduler-url ...` on the demo's cluster, as the banner
    prints it: sizes as people write them (1.5 GiB, not 1.49414 GiB), durations in Go's form, and each
    finding with its own nodes' evidence only. The real extender filters the pod over the demo's nodes;
    its decision record is read at NOW, as the doctor is. (``kube_api``, not ``api``: the extender
    writes events and handshakes beside the doctor's reads.)"""
    api = kube_api
    at = datetime.fromisoformat(NOW.replace("Z", "+00:00"))
    objects = cluster.objects(4, at, scenarios=True)
    for obj in (*objects, scheduler_pod()):
        api.store.put(obj)
    pending = next(o for o in objects if o["metadata"]["name"] == cluster.PENDING)
    nodes = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    with running(api) as ext:
        assert ext.metrics_server is not None and ext.filters.recorder is not None
        ext.filters.recorder.now = lambda: at  # the record's lock ages at the doctor's NOW
        assert filter_pod(ext, pending, nodes)["NodeNames"] is None
        url = ext.metrics_server.url
        target = f"scenarios/{cluster.PENDING}"
        code, out = run_doctor(kube_config_file, "pod", target, "--scheduler-url", url)
    assert code == 2
    _check("demo_pending_pod.txt", out.replace(url, "http://127.0.0.1:9395"))
