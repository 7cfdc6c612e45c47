"""`hami-doctor snapshot` reads the scheduling configuration the cluster holds: the scheduler's flags
(its pods, else its Deployment), the device config ConfigMap and the device plugin's node config."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import yaml

from hami.core import names
from hami.core.snapshot import reader as snapread
from hami.doctor.main import main as doctor
from hami.testing import chart, cluster, install
from hami.testing.democonfig import demo_values
from hami.testing.kubeapi import KubeAPIServer

NOW = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)


def _install(api: KubeAPIServer, tmp_path: Path) -> None:
    objs = cluster.objects(gpus=4, now=NOW, scenarios=True)
    for obj in objs:
        obj["metadata"]["creationTimestamp"] = "2026-03-02T11:00:00Z"
        api.store.put(obj)
    values = tmp_path / "demo-values.yaml"
    values.write_text(yaml.safe_dump(demo_values(scenarios=True)), encoding="utf-8")
    rendered = chart.render([chart.EXAMPLES / "production.yaml", values])
    install.install(api.store, rendered, [o["metadata"]["name"] for o in objs if o["kind"] == "Node"])


def _snapshot(kube_config_file: Path, tmp_path: Path) -> Path:
    out = tmp_path / "snap.json"
    assert doctor(["snapshot", "-o", str(out), "--kubeconfig", str(kube_config_file)]) == 0
    return out


def test_the_demo_cluster_s_configuration_needs_no_assumption(
    kube_api: KubeAPIServer, kube_config_file: Path, tmp_path: Path
) -> None:
    _install(kube_api, tmp_path)
    snapshot = snapread.load_snapshot(_snapshot(kube_config_file, tmp_path))
    assert snapshot.notes == ()
    s = snapshot.scheduler
    assert (s.node_policy, s.gpu_policy, s.node_lock_expire) == ("binpack", "spread", 300.0)
    # the chart's device config, as its ConfigMap holds it
    assert s.device_config["resourceMemoryName"] == "nvidia.com/gpumem"
    # sim-node's cards were registered at 1.5 (the device plugin's node config ConfigMap)
    scaling = {n.name: n.memory_scaling for n in snapshot.nodes}
    assert scaling[cluster.NODE] == cluster.MEMORY_SCALING
    assert scaling[cluster.FRAG_NODE] == 1.0


def test_without_scheduler_pods_the_deployment_s_flags_are_read(
    kube_api: KubeAPIServer, kube_config_file: Path, tmp_path: Path
) -> None:
    _install(kube_api, tmp_path)
    for pod in kube_api.store.list("pods"):
        if pod["metadata"]["labels"].get(names.APP_LABEL) == names.SCHEDULER_APP:
            kube_api.store.remove("pods", pod["metadata"]["name"], pod["metadata"]["namespace"])
    snapshot = snapread.load_snapshot(_snapshot(kube_config_file, tmp_path))
    assert not [n for n in snapshot.notes if "scheduler-policy" in n or "node-lock-timeout" in n]
    assert (snapshot.scheduler.node_policy, snapshot.scheduler.gpu_policy) == ("binpack", "spread")
