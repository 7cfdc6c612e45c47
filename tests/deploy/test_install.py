"""The chart rendered with the production template, installed into the API emulator (its pods as the
controllers would make them): the extender, started from its rendered flags and its downward-API
environment, labels the replicas leader and follower, and hami-doctor finds the scheduler, its
leader and Lease, and the device plugin on each GPU node, by the names the chart gives them."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hami.core import names
from hami.core.codec.node_devices import encode_node_devices
from hami.core.devices import DeviceInfo
from hami.core.kube.options import KubeOptions
from hami.doctor.main import main as doctor
from hami.scheduler.extender import main as scheduler_main
from hami.scheduler.extender.daemon import Extender, Options
from hami.testing import chart, install
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until

Obj = dict[str, Any]
ROLE = "hami.io/scheduler-role"


def _node(name: str, gpu: bool) -> Obj:
    node: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}}}
    if gpu:
        dev = DeviceInfo(
            id=f"GPU-{name}-0", index=0, count=10, devmem=16384, devcore=100, type="NVIDIA-Tesla T4"
        )
        node["metadata"]["labels"]["gpu"] = "on"
        node["metadata"]["annotations"] = {"hami.io/node-nvidia-register": encode_node_devices([dev])}
        node["status"] = {"allocatable": {"nvidia.com/gpu": "10"}}
    return node


def _doctor(kubeconfig: Path, *args: str) -> tuple[int, Obj]:
    out = io.StringIO()
    code = doctor([*args, "--kubeconfig", str(kubeconfig), "--json"], stdin=io.StringIO(), stdout=out)
    return code, json.loads(out.getvalue())


def _findings(doc: Obj, title: str) -> dict[str, Obj]:
    (section,) = [s for s in doc["sections"] if s["title"] == title]
    return {f["code"]: f for f in section["findings"]}


def test_rendered_install_is_found_by_the_doctor_and_labelled_by_the_extender(
    kube_api: KubeAPIServer, kube_config_file: Path
) -> None:
    for name, gpu in (("gpu-node-01", True), ("gpu-node-02", True), ("cpu-node-01", False)):
        kube_api.store.put(_node(name, gpu))
    objects = chart.render([chart.EXAMPLES / "production.yaml"])
    installed = install.install(kube_api.store, objects, ["gpu-node-01", "gpu-node-02", "cpu-node-01"])
    leader, follower = installed.pods[names.SCHEDULER_DEPLOYMENT]
    assert len(installed.pods[names.DEVICE_PLUGIN_DAEMONSET]) == 2  # the GPU nodes only

    # kube-scheduler in the leader pod holds the Lease (identity: hostname, i.e. the pod name, + "_" + uuid)
    kube_api.store.put(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": names.SCHEDULER_LEASE, "namespace": names.NAMESPACE},
            "spec": {
                "holderIdentity": f"{leader['metadata']['name']}_8c1e3f1a-6a0b-4a51-9d2e-1f1f5a1e0b1c",
                "leaseDurationSeconds": 15,
                "renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        }
    )

    container = next(c for c in leader["spec"]["containers"] if c["name"] == names.EXTENDER_CONTAINER)
    args = scheduler_main.build_parser().parse_args(container["args"])
    env = install.downward_env(leader, names.EXTENDER_CONTAINER)
    assert env["POD_NAME"] == leader["metadata"]["name"] and env["POD_NAMESPACE"] == names.NAMESPACE
    # The rendered flags, but loopback listeners without TLS and the emulator as the API server.
    opts = replace(
        Options(),
        http_bind="127.0.0.1:0",
        metrics_bind="127.0.0.1:0",
        kube=KubeOptions(qps=-1, host=kube_api.url, timeout=5.0),
        scheduler_name=args.scheduler_name,
        leader_elect=args.leader_elect,
        leader_elect_resource_name=args.leader_elect_resource_name,
        leader_elect_resource_namespace=args.leader_elect_resource_namespace,
        leader_identity=env["POD_NAME"],  # the pod's hostname
        pod_name=env["POD_NAME"],
        pod_namespace=env["POD_NAMESPACE"],
        register_tick=0.2,
        gc_freeze=False,
    )
    extender = Extender(opts)
    extender.start()
    try:

        def roles() -> dict[str, str | None]:
            out = {}
            for p in (leader, follower):
                stored = kube_api.store.get("pods", p["metadata"]["name"], names.NAMESPACE) or {}
                out[p["metadata"]["name"]] = (stored["metadata"].get("labels") or {}).get(ROLE)
            return out

        wait_until(
            lambda: (
                roles() == {leader["metadata"]["name"]: "leader", follower["metadata"]["name"]: "follower"}
            ),
            15,
            "the role labels",
        )
        kube_api.store.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "train-1", "namespace": "ml"},
                "spec": {
                    "schedulerName": names.SCHEDULER_DEPLOYMENT,
                    "containers": [
                        {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                    ],
                },
                "status": {"phase": "Pending"},
            }
        )
        _code, doc = _doctor(kube_config_file, "pod", "ml/train-1")
        codes = {f["code"]: f for s in doc["sections"] for f in s["findings"]}
        assert codes["scheduler.running"]["severity"] == "ok", codes
        # the Lease comes from the extenders' own --leader-elect-resource-* flags
        assert codes["scheduler.lease.ok"]["severity"] == "ok", codes
        assert not {"scheduler.missing", "scheduler.no-leader", "scheduler.not-running"} & set(codes)
        evidence = " ".join(codes["scheduler.running"]["evidence"])
        assert f"{names.NAMESPACE}/{leader['metadata']['name']}" in evidence and "role leader" in evidence

        _code, doc = _doctor(kube_config_file, "nodes")
        for gpu_node in ("gpu-node-01", "gpu-node-02"):
            found = _findings(doc, f"node {gpu_node}")
            assert found["node.device-plugin.running"]["severity"] == "ok", found
            assert found["node.handshake.ok"]["severity"] == "ok", found  # the leader wrote it
            # the deliberate difference from the guides' Unix timestamp is said where it is seen
            assert any("not a Unix timestamp" in e for e in found["node.handshake.ok"]["evidence"])
        assert not [c for c in _findings(doc, "node cpu-node-01") if c.startswith("node.device-plugin")]
    finally:
        extender.stop()


def test_a_gpu_node_without_its_device_plugin_pod_is_named(
    kube_api: KubeAPIServer, kube_config_file: Path
) -> None:
    kube_api.store.put(_node("gpu-node-01", True))
    orphan = _node("gpu-node-02", True)
    del orphan["metadata"]["labels"]["gpu"]  # the DaemonSet's nodeSelector misses it
    kube_api.store.put(orphan)
    install.install(kube_api.store, chart.render(), ["gpu-node-01", "gpu-node-02"])
    code, doc = _doctor(kube_config_file, "node", "gpu-node-02")
    missing = _findings(doc, "node gpu-node-02")["node.device-plugin.missing"]
    assert missing["severity"] == "warning" and "gpu-node-01" in missing["evidence"][0]
    assert "gpu=on" in missing["fix"] and code >= 1
