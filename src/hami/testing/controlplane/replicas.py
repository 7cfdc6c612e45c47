"""More copies of the chart's scheduler pod on the real control plane, beside the one ``deploy`` runs:

    replica = start_replica(hami, "hami-scheduler-b", scheduler_name="hami-ha", lease="hami-ha")
    lone = start_extender(hami, "extender-f", "--leader-elect=false")   # for tests that call
                                                                        # /filter and /bind themselves
    kill(hami.cp, replica.kube_scheduler)                               # SIGKILL, as a node dies

A replica is the extender and kube-scheduler with the chart's arguments and configuration (only
the listeners, the Lease's name and the profile's ``schedulerName`` changed), each in a UTS namespace
of its own whose hostname is the replica's pod name, as in a pod: kube-scheduler's Lease identity is
``<hostname>_<uuid>`` and the extender's default identity is its hostname, so on one machine two
replicas would otherwise both match the holder. That needs ``unshare --uts`` (root or
CAP_SYS_ADMIN); ``uts_problem`` says when it is missing. The replicas set no ``POD_NAMESPACE``, so
they leave the role labels of the chart's pods alone.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import requests
import yaml

from hami.testing.controlplane import schedconfig
from hami.testing.controlplane.deploy import EXTENDER_SA, SA_GROUPS, Hami
from hami.testing.controlplane.run import ControlPlane
from hami.testing.processes import Child, free_port
from hami.testing.wait import wait_until

# `sh -c SCRIPT NAME ARGV...`: $0 is the hostname, "$@" the command
_UTS = ("unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"')


def uts_problem() -> str | None:
    """None when this process can give a child a hostname of its own, else why not."""
    try:
        done = subprocess.run(
            [*_UTS, "hami-uts-probe", "true"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unshare --uts cannot run: {err}"
    if done.returncode != 0:
        return f"unshare --uts failed (needs root or CAP_SYS_ADMIN): {done.stderr.strip()}"
    return None


def with_hostname(hostname: str, argv: Sequence[str]) -> list[str]:
    return [*_UTS, hostname, *argv]


@dataclass
class Replica:
    name: str
    extender: Child
    ports: dict[str, int]
    kube_scheduler: Child | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.ports['extender']}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['metrics']}"

    def metric(self, sample: str) -> float | None:
        """One sample of its /metrics, summed over its labels (0 when absent); None when it does
        not answer."""
        try:
            text = requests.get(self.metrics_url + "/metrics", timeout=10).text
        except requests.RequestException:
            return None
        found = re.findall(rf"^{re.escape(sample)}(?:\{{[^}}]*\}})? (\S+)$", text, re.MULTILINE)
        return sum(float(v) for v in found)


def start_extender(
    hami: Hami, name: str, *extra_args: str, hostname: str = "", ports: dict[str, int] | None = None
) -> Replica:
    """The extender as the chart's Deployment runs it (``extra_args`` appended; argparse keeps the
    last of a repeated flag), as the ServiceAccount, on free loopback ports (or ``ports``: a
    restart keeps them), with ``hostname`` if given; returns once its /readyz answers."""
    ports = dict(ports or {n: free_port() for n in ("extender", "webhook", "metrics")})
    args = schedconfig.extender_args(
        hami.objects,
        hami.files,
        http=f"127.0.0.1:{ports['extender']}",
        webhook=f"127.0.0.1:{ports['webhook']}",
        metrics=f"127.0.0.1:{ports['metrics']}",
    )
    kubeconfig = hami.cp.kubeconfig_for(EXTENDER_SA, SA_GROUPS)
    argv = [sys.executable, "-u", "-m", "hami.scheduler", *args, "--kubeconfig", str(kubeconfig), *extra_args]
    child = hami.cp.procs.start(name, with_hostname(hostname, argv) if hostname else argv)
    hami.cp.wait_http(child, f"http://127.0.0.1:{ports['metrics']}/readyz", f"{name}'s /readyz")
    return Replica(name, child, ports)


def kube_scheduler_config(hami: Hami, extender_port: int, scheduler_name: str, lease: str) -> str:
    """The chart's KubeSchedulerConfiguration for a replica: its profile named ``scheduler_name``
    and its Lease ``lease`` (so that it leaves the chart's own scheduler and pods alone)."""
    config = yaml.safe_load(schedconfig.scheduler_config(hami.objects, extender_port, hami.files))
    config["leaderElection"]["resourceName"] = lease
    (profile,) = config["profiles"]
    profile["schedulerName"] = scheduler_name
    return yaml.safe_dump(config, sort_keys=False)


def grant_lease(hami: Hami, lease: str) -> None:
    """The chart's Lease Roles (and their RoleBindings) once more for Lease ``lease``: the chart
    grants its ServiceAccount its own Lease by name only."""
    roles = {
        o["metadata"]["name"]: o
        for o in hami.objects
        if o["kind"] == "Role" and any("leases" in r.get("resources", []) for r in o["rules"])
    }
    copies = []
    for role in roles.values():
        rules = [{**r, "resourceNames": [lease]} for r in role["rules"]]
        meta = {**role["metadata"], "name": f"{role['metadata']['name']}-{lease}"}
        copies.append({**role, "metadata": meta, "rules": rules})
    for binding in (o for o in hami.objects if o["kind"] == "RoleBinding"):
        if binding["roleRef"]["name"] in roles:
            meta = {**binding["metadata"], "name": f"{binding['metadata']['name']}-{lease}"}
            ref = {**binding["roleRef"], "name": f"{binding['roleRef']['name']}-{lease}"}
            copies.append({**binding, "metadata": meta, "roleRef": ref})
    text = "".join("---\n" + yaml.safe_dump(o, sort_keys=False) for o in copies)
    hami.cp.kubectl("apply", "--server-side", "--field-manager=hami-test", "-f", "-", input=text)


def start_replica(hami: Hami, name: str, *, scheduler_name: str, lease: str) -> Replica:
    """The extender (following Lease ``lease``) and kube-scheduler (campaigning for it), both with
    hostname ``name``; returns once both are healthy. ``grant_lease`` first."""
    cp = hami.cp
    replica = start_extender(hami, f"{name}-extender", f"--leader-elect-resource-name={lease}", hostname=name)
    replica.name = name
    config = cp.work / f"kube-scheduler-{name}.yaml"
    kubeconfig = cp.kubeconfig_for(EXTENDER_SA, SA_GROUPS)
    text = kube_scheduler_config(hami, replica.ports["extender"], scheduler_name, lease)
    config.write_text(schedconfig.with_kubeconfig(text, kubeconfig), encoding="utf-8")
    replica.ports["kube-scheduler"] = port = free_port()
    assert cp.binaries is not None
    argv = [
        str(cp.binaries.kube_scheduler), "--config", str(config),
        "--authentication-kubeconfig", str(kubeconfig), "--authorization-kubeconfig", str(kubeconfig),
        "--bind-address", "127.0.0.1", "--secure-port", str(port),
    ]  # fmt: skip
    replica.kube_scheduler = cp.procs.start(f"{name}-kube-scheduler", with_hostname(name, argv))
    with requests.Session() as s:
        s.trust_env = False
        s.verify = False  # its self-signed serving certificate: only liveness is checked here

        def healthy() -> bool:
            try:
                return s.get(f"https://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
            except requests.RequestException:
                return False

        wait_until(healthy, cp.ready_timeout, f"{name}'s kube-scheduler /healthz", interval=0.2)
    return replica


def kill(cp: ControlPlane, child: Child | None) -> None:
    """SIGKILL ``child`` (no Lease released, no goodbye) and forget it."""
    if child is None:
        return
    child.proc.kill()
    child.proc.wait(timeout=30)
    if child in cp.procs.children:
        cp.procs.children.remove(child)
