"""The Helm chart installed on the real control plane, and its scheduler pod run as local processes.

    hami = install(cp, workdir, nodes=[(node, gpus)])   # kubectl apply --server-side of the chart
    hami.start_scheduler()          # the extender, then kube-scheduler, as the chart runs them

``install`` renders ``charts/hami`` (Helm's SDK) with the TLS Secrets provided rather than issued by
cert-manager (whose CRDs and controller are not here), applies every object with
``kubectl apply --server-side`` so that kube-apiserver validates each one, writes the webhook's
``caBundle`` as cert-manager's CA injector would, creates the Nodes, and creates the pods the
Deployment and DaemonSet controllers would (``hami.testing.install``), Running, on the nodes.
``start_scheduler`` runs the extender (``python -m hami.scheduler`` with the Deployment's arguments,
as the ServiceAccount ``hami-scheduler``: the chart's RBAC decides what it may do) and
kube-scheduler (the chart's KubeSchedulerConfiguration, as the same ServiceAccount), and routes the
webhook Service to the extender's webhook listener (egress.py).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hami.core import names
from hami.testing import chart, cluster
from hami.testing import install as standins
from hami.testing.controlplane import pki, schedconfig
from hami.testing.controlplane.run import ControlPlane
from hami.testing.processes import Child, ProcessGroup, free_port
from hami.testing.wait import wait_until

Obj = dict[str, Any]
# cert-manager issues the extender's certificates by default; here they are given as Secrets
PROVIDED_TLS = "scheduler.extender.tls.certManager=false"
EXTENDER_SA = pki.service_account_user(names.NAMESPACE, names.SCHEDULER_DEPLOYMENT)
DEVICE_PLUGIN_SA = pki.service_account_user(names.NAMESPACE, names.DEVICE_PLUGIN_DAEMONSET)
SA_GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{names.NAMESPACE}")
WEBHOOK_PORT = 443  # the chart's Service port for the webhook


@dataclass
class Hami:
    cp: ControlPlane
    workdir: Path
    objects: list[Obj]
    files: schedconfig.ChartFiles
    applied: str  # what kubectl apply --server-side printed
    nodes: list[str] = field(default_factory=list)
    pods: dict[str, list[Obj]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    extender: Child | None = None

    @property
    def extender_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['extender']}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['metrics']}"

    @property
    def scheduler_pod(self) -> Obj:
        """The Deployment's first pod (by name): the replica the extender process stands for."""
        return min(self.pods[names.SCHEDULER_DEPLOYMENT], key=lambda p: str(p["metadata"]["name"]))

    def start_node_agents(self, gpus: int, split: int) -> None:
        """On each of this install's nodes, what runs there: the device plugin (``gpus`` fake cards,
        ``split`` slots each, UUIDs ``GPU-<node>-<i>``, as the ServiceAccount ``hami-device-plugin``)
        and a kubelet stand-in that calls its Allocate for the pods bound to the node, as the kubelet
        does when it starts them: the plugin then releases the node lock the bind took."""
        api = self.cp.start_proxy()
        kubeconfig = self.cp.kubeconfig_for(DEVICE_PLUGIN_SA, SA_GROUPS)
        for node in self.nodes:
            work = self.workdir / "nodes" / node
            plugins = work / "device-plugins"
            plugins.mkdir(parents=True, exist_ok=True)
            spec = cluster.fake_nvml_spec(gpus)
            for i, device in enumerate(spec["devices"]):
                device["uuid"] = f"GPU-{node}-{i}"
            (work / "fake-nvml.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
            (work / "node-config.json").write_text('{"nodeconfig": []}\n', encoding="utf-8")
            standin = ["--dir", str(plugins), "--api", api, "--node", node]
            kubelet = self.cp.procs.python(f"kubelet-{node}", "hami.testing.kubelet", standin)
            ready = self.cp.ready_timeout
            self.cp.procs.wait_for_log(kubelet, "kubelet stand-in serving", ready, f"the kubelet on {node}")
            port = free_port()
            args = [
                "--node-name", node, "--nvml", "fake", "--fake-nvml-spec", str(work / "fake-nvml.yaml"),
                "--device-plugin-path", str(plugins), "--hook-path", str(work / "hook"),
                "--vgpu-lock-dir", str(work / "vgpulock"), "--mig-apply-lock", str(work / "mig.lock"),
                "--node-config-file", str(work / "node-config.json"), "--device-split-count", str(split),
                "--metrics-bind-address", f"127.0.0.1:{port}", "--kubeconfig", str(kubeconfig),
            ]  # fmt: skip
            plugin = self.cp.procs.python(f"device-plugin-{node}", "hami.deviceplugin", args)
            self.cp.wait_http(plugin, f"http://127.0.0.1:{port}/metrics", f"the device plugin on {node}")
            self.cp.procs.wait_for_log(kubelet, r"registered, \d+ devices", ready, f"registration on {node}")

    def stop_scheduler(self) -> dict[str, int | None]:
        """kube-scheduler, then the extender (if in the control plane's processes); exit codes."""
        codes = {"kube-scheduler": self.cp.stop_kube_scheduler()}
        child, self.extender = self.extender, None
        if child is not None and child in self.cp.procs.children:
            codes["hami-scheduler"] = self.cp.stop_child(child)
        return codes

    def start_scheduler(self, extra_args: Sequence[str] = ()) -> None:
        """The extender (until its /readyz answers), the webhook route, then kube-scheduler."""
        self.start_extender(extra_args)
        self.start_kube_scheduler()

    def start_extender(
        self, extra_args: Sequence[str] = (), procs: ProcessGroup | None = None, name: str = "hami-scheduler"
    ) -> Child:
        """The extender as the Deployment runs it (``extra_args`` after the chart's), in ``procs``
        (default: the control plane's) as ``name``; the webhook Service routed to it."""
        for port in ("extender", "webhook", "metrics"):
            self.ports.setdefault(port, free_port())
        args = schedconfig.extender_args(
            self.objects,
            self.files,
            http=f"127.0.0.1:{self.ports['extender']}",
            webhook=f"127.0.0.1:{self.ports['webhook']}",
            metrics=f"127.0.0.1:{self.ports['metrics']}",
        )
        kubeconfig = self.cp.kubeconfig_for(EXTENDER_SA, SA_GROUPS)
        env = standins.downward_env(self.scheduler_pod, names.EXTENDER_CONTAINER)
        argv = [*args, "--kubeconfig", str(kubeconfig), *extra_args]
        self.extender = (procs or self.cp.procs).python(name, "hami.scheduler", argv, env=env)
        self.cp.wait_http(self.extender, self.metrics_url + "/readyz", "the extender's /readyz")
        webhook = self.ports["webhook"]
        self.cp.route_service(names.NAMESPACE, names.SCHEDULER_DEPLOYMENT, WEBHOOK_PORT, webhook)
        return self.extender

    def start_kube_scheduler(self) -> Child:
        """kube-scheduler with the chart's configuration, as the chart's ServiceAccount."""
        config = schedconfig.scheduler_config(self.objects, self.ports["extender"], self.files)
        return self.cp.start_kube_scheduler(config, user=EXTENDER_SA, groups=SA_GROUPS)


def _yaml_stream(objects: Sequence[Obj]) -> str:
    return "".join("---\n" + yaml.safe_dump(o, sort_keys=False) for o in objects)


def install(
    cp: ControlPlane,
    workdir: Path,
    nodes: Sequence[tuple[Obj, int]] = (),
    *,
    values_files: Sequence[Path] = (),
    sets: Sequence[str] = (),
    running_on: Sequence[Obj] = (),
) -> Hami:
    """The chart applied server-side, its webhook's caBundle set, ``nodes`` (node, nvidia.com/gpu
    allocatable) created Ready, and the workloads' pods created Running on them and on the existing
    nodes ``running_on``."""
    assert cp.pki is not None
    objects = chart.render(values_files, [*sets, PROVIDED_TLS])
    files = schedconfig.ChartFiles.write(cp.pki, objects, workdir / "scheduler-pod")
    applied = cp.kubectl(
        "apply", "--server-side", "--field-manager=helm", "-f", "-",
        input=_yaml_stream([*files.secrets(), *objects]),
    ).stdout  # fmt: skip
    webhook = next(o for o in objects if o["kind"] == "MutatingWebhookConfiguration")
    bundle = [
        {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": files.ca_bundle()}
        for i in range(len(webhook["webhooks"]))
    ]
    cp.kubectl(
        "patch", "mutatingwebhookconfiguration", webhook["metadata"]["name"], "--type=json",
        "-p", yaml.safe_dump(bundle, default_flow_style=True),
    )  # fmt: skip
    created = [cp.create_node(node, gpus) for node, gpus in nodes]
    hami = Hami(cp, workdir, objects, files, applied, [n["metadata"]["name"] for n in created])
    hami.pods = run_workloads(cp, [*running_on, *created])
    return hami


def run_workloads(cp: ControlPlane, nodes: list[Obj]) -> dict[str, list[Obj]]:
    """The pods the Deployment and DaemonSet controllers would make, created bound to their nodes
    with the kubelet's Running status (neither controllers nor kubelets run here)."""
    with cp.session() as s:
        workloads = []
        for plural, kind in (("deployments", "Deployment"), ("daemonsets", "DaemonSet")):
            reply = s.get(f"{cp.url}/apis/apps/v1/namespaces/{names.NAMESPACE}/{plural}", timeout=30)
            reply.raise_for_status()
            workloads += [{**w, "apiVersion": "apps/v1", "kind": kind} for w in reply.json()["items"]]
        installed, updated = standins.controlled(workloads, nodes)
        for workload in updated:  # the controllers' status: replicas ready, pods scheduled
            plural = "deployments" if workload["kind"] == "Deployment" else "daemonsets"
            path = f"/apis/apps/v1/namespaces/{names.NAMESPACE}/{plural}/{workload['metadata']['name']}"
            path += "/status"
            reply = s.patch(cp.url + path, json={"status": workload["status"]}, timeout=30,
                            headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
            if reply.status_code != 200:
                raise AssertionError(f"status of {workload['kind']}: {reply.status_code} {reply.text}")
        base = f"{cp.url}/api/v1/namespaces/{names.NAMESPACE}/pods"
        out: dict[str, list[Obj]] = {}
        for owner, pods in installed.pods.items():
            for pod in pods:
                body = copy.deepcopy(pod)
                status = body.pop("status")
                created = s.post(base, json=body, timeout=30)
                if created.status_code != 201:
                    name = pod["metadata"]["name"]
                    raise AssertionError(f"pod {name}: {created.status_code} {created.text}")
                running = s.patch(
                    f"{base}/{pod['metadata']['name']}/status",
                    json={"status": status},
                    headers={"Content-Type": "application/merge-patch+json"},
                    timeout=30,
                )
                if running.status_code != 200:
                    raise AssertionError(f"status of {pod['metadata']['name']}: {running.text}")
                out.setdefault(owner, []).append(running.json())
        return out


def wait_bound(cp: ControlPlane, namespace: str, name: str, timeout: float = 120.0) -> Obj:
    """The pod once kube-scheduler has bound it (spec.nodeName set)."""
    with cp.session() as s:

        def bound() -> Obj | None:
            reply = s.get(f"{cp.url}/api/v1/namespaces/{namespace}/pods/{name}", timeout=30)
            pod: Obj = reply.json()
            return pod if reply.status_code == 200 and pod["spec"].get("nodeName") else None

        return wait_until(bound, timeout, f"pod {namespace}/{name} bound", interval=0.5)


def log_lines(child: Child, pattern: str) -> list[str]:
    """The lines of ``child``'s log that match ``pattern``."""
    text = child.log.read_text(encoding="utf-8", errors="replace")
    return [line for line in text.splitlines() if re.search(pattern, line)]
