"""`hami-doctor snapshot` reads the scheduling configuration the cluster holds: the scheduler's flags
(its pods, else its Deployment), the device config ConfigMap and the device plugin's node config; and
what the API implies about a card's health over the history."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import yaml

from hami.core import annotations as ann
from hami.core import names
from hami.core.codec.node_devices import encode_node_devices
from hami.core.snapshot import model as snap
from hami.core.snapshot import reader as snapread
from hami.demo.config import demo_values
from hami.doctor.capture import unhealthy_outages
from hami.doctor.main import main as doctor
from hami.testing import chart, cluster, install, whatif
from hami.testing.builders import dev
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


def test_an_unhealthy_card_is_out_only_after_the_last_pod_the_scheduler_placed_on_it() -> None:
    cards = [dev("n1-gpu0", 8000, index=0), dev("n1-gpu1", 8000, index=1, health=False)]
    nodes = [snap.Node("n1", {ann.NODE_REGISTER: encode_node_devices(cards)}, allocatable_gpus=20)]
    pods = [
        whatif.pod("a", 10, mem=1000, placed=("n1", ["n1-gpu1"])),
        whatif.pod("b", 50, mem=1000, placed=("n1", ["n1-gpu1"])),
        whatif.pod("by-hand", 90, mem=1000, placed=("n1", ["n1-gpu1"]), scheduled=-1),  # proves nothing
    ]
    (out,) = unhealthy_outages(nodes, pods, whatif.T0)
    assert (out.node, out.device, out.since, out.until) == ("n1", "n1-gpu1", whatif.T0 + 51, None)
    # a card that never took a pod is out from the start of the history
    assert unhealthy_outages(nodes, [], whatif.T0)[0].since == whatif.T0
