"""The stack's (``make demo``'s, the live stack test's) Kubernetes on the real control plane.

The stand-ins that speak plain HTTP to the API (kube-state-metrics, the kubelet's pod status, the
fragmented node's registration, the batch-pod churn) reach kube-apiserver through ``kubectl proxy``
on the stack's ``kubeapi`` port, so they run unchanged; the daemons use the admin kubeconfig, copied
to the stack's kubeconfig path (the banner's `kubectl` and `hami-doctor` lines are the same). The
chart is installed by ``deploy.install`` (server-side apply), the extender runs with the chart's
arguments, and the real kube-scheduler, with the chart's configuration, replaces the stand-in's
scheduling (the stand-in only creates and deletes batch pods).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hami.testing import install
from hami.testing.controlplane.deploy import Hami
from hami.testing.controlplane.deploy import install as install_chart
from hami.testing.controlplane.run import ControlPlane
from hami.testing.processes import ProcessGroup

Obj = dict[str, Any]


class RealKube:
    def __init__(self, workdir: Path, proxy_port: int, pod_logs: Path, ready_timeout: float) -> None:
        self.cp = ControlPlane(workdir / "controlplane", pod_logs=pod_logs, ready_timeout=ready_timeout)
        self.proxy_port = proxy_port
        self.workdir = workdir
        self.hami: Hami | None = None

    def start(self, kubeconfig: Path) -> None:
        """The control plane, ``kubectl proxy`` on 127.0.0.1:``proxy_port``, and its admin
        kubeconfig written to ``kubeconfig``."""
        self.cp.start()
        self.cp.start_proxy(self.proxy_port)
        shutil.copyfile(self.cp.kubeconfig, kubeconfig)

    def seed(self, objects: Sequence[Obj]) -> None:
        """``objects`` (Nodes and Pods, with their status) created; their namespaces first (the real
        server has no implicit namespaces) and the batch pods' (``ml-batch``)."""
        namespaces = {o["metadata"]["namespace"] for o in objects if o["kind"] == "Pod"} | {"ml-batch"}
        for ns in sorted(namespaces):
            self.cp.kubectl("create", "namespace", ns)
        with self.cp.session() as s:
            for obj in objects:
                if obj["kind"] == "Node":
                    self.cp.create_node(obj)
                    continue
                base = f"{self.cp.url}/api/v1/namespaces/{obj['metadata']['namespace']}/pods"
                body = {k: v for k, v in obj.items() if k != "status"}
                name = obj["metadata"]["name"]
                created = s.post(base, json=body, timeout=30)
                if created.status_code != 201:
                    raise AssertionError(f"pod {name}: {created.status_code} {created.text}")
                status = s.patch(
                    f"{base}/{name}/status", json={"status": obj["status"]},
                    headers={"Content-Type": "application/merge-patch+json"}, timeout=30,
                )  # fmt: skip
                if status.status_code != 200:
                    raise AssertionError(f"status of pod {name}: {status.text}")

    def install_chart(self, nodes: Sequence[Obj], values_files: Sequence[Path]) -> install.Installed:
        work = self.workdir / "chart"
        self.hami = install_chart(self.cp, work, values_files=values_files, running_on=nodes)
        return install.Installed(self.hami.pods)

    def start_extender(
        self, procs: ProcessGroup, name: str, ports: dict[str, int], args: Sequence[str]
    ) -> None:
        """The extender with the chart's arguments (then ``args``), its listeners on ``ports``
        (``extender``, ``metrics``), in the stack's processes as ``name``."""
        assert self.hami is not None
        self.hami.ports.update(ports)
        self.hami.start_extender(args, procs=procs, name=name)

    def start_kube_scheduler(self) -> None:
        assert self.hami is not None
        self.hami.start_kube_scheduler()

    def stop(self) -> None:
        """The control plane's processes (kube-scheduler, kubectl proxy, kube-apiserver, etcd)."""
        self.cp.stop()
