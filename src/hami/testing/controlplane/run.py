"""A real control plane on loopback: etcd, kube-apiserver and (once the chart's configuration is known)
kube-scheduler, each a child process with its log in ``<workdir>/logs``.

    with ControlPlane(workdir) as cp:           # builds the binaries first if they are not cached
        cp.kubeconfig                           # kubectl's (user hami-admin, group system:masters)
        cp.kubeconfig_for(service_account_user("kube-system", "hami-scheduler"))  # a daemon's
        cp.create_node(node)                    # Ready and schedulable: no kubelet, no controllers
        cp.start_kube_scheduler(config_yaml)    # schedconfig.from_chart(...) writes the chart's
        cp.route_service("kube-system", "hami-scheduler", 443, webhook_port)
        cp.kubectl("get", "pods", "-A")

No controller manager runs, so admission is set up for that: ``ServiceAccount`` is off (no controller
creates the ``default`` ServiceAccounts or their tokens) and so is ``TaintNodesByCondition`` (no node
lifecycle controller would lift the ``not-ready`` taint it puts on every new Node). Namespaces cannot
be deleted (no namespace controller empties them) and Deployments make no pods. No kubelet either:
a thread does the kubelet's part of a graceful pod deletion (``_finish_deletions``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import requests

from hami.testing.controlplane import build, nodes, pki, schedconfig
from hami.testing.controlplane.egress import EgressProxy, egress_config
from hami.testing.controlplane.kubeletlogs import KubeletLogs
from hami.testing.processes import Child, ProcessGroup, StartError, free_port, log_tail
from hami.testing.wait import wait_until

Obj = dict[str, Any]
READY_TIMEOUT_S = 180.0  # etcd and kube-apiserver start in 5-20 s here; generous for a loaded machine
DISABLED_ADMISSION = ("ServiceAccount", "TaintNodesByCondition")
SCHEDULER_PROFILE_NAME = "hami-scheduler"


class ControlPlane:
    def __init__(
        self,
        workdir: Path,
        *,
        binaries: build.Binaries | None = None,
        apiserver_args: Sequence[str] = (),
        ready_timeout: float = READY_TIMEOUT_S,
        pod_logs: Path | None = None,
    ) -> None:
        self.work = workdir
        self.binaries = binaries
        self.apiserver_args = list(apiserver_args)
        self.ready_timeout = ready_timeout
        self.procs = ProcessGroup(workdir / "logs")
        self.ports: dict[str, int] = {}
        self.pki: pki.PKI | None = None
        self.egress: EgressProxy | None = None
        self.etcd: Child | None = None
        self.apiserver: Child | None = None
        self.kube_scheduler: Child | None = None
        self.kubeconfig = workdir / "kubeconfig"
        # what `kubectl logs` shows: <pod_logs>/<namespace>_<pod>/<container>.log (kubeletlogs.py)
        self.pod_logs = pod_logs or workdir / "pod-logs"
        self.kubelet: KubeletLogs | None = None
        self._stopping = threading.Event()
        self._reaper: threading.Thread | None = None
        self._sockdir = workdir
        self._admin = (workdir / "admin.crt", workdir / "admin.key")

    # ---- addresses and credentials ----

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['etcd']}"

    def _pki(self) -> pki.PKI:
        if self.pki is None:
            raise RuntimeError("the control plane is not started")
        return self.pki

    def kubeconfig_for(self, user: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig for ``user`` (a client certificate with ``groups``), for a daemon or a tool."""
        cert, key = self._pki().client(user, groups)
        path = self.work / f"kubeconfig-{user.replace(':', '_')}"
        return pki.write_kubeconfig(path, pki.kubeconfig(self.url, self._pki().ca, cert, key, user))

    def session(self) -> requests.Session:
        """An HTTP session as kubectl's user (for raw API calls in tests)."""
        cert, key = self._admin
        s = requests.Session()
        # not the environment's: REQUESTS_CA_BUNDLE would override this session's CA, and a proxy
        # variable would send loopback traffic elsewhere
        s.trust_env = False
        s.cert = (str(cert), str(key))
        s.verify = str(self._pki().ca)
        return s

    # ---- lifecycle ----

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        if self.binaries is None:
            self.binaries = build.ensure()
        self.work.mkdir(parents=True, exist_ok=True)
        self.pki = pki.PKI(self.work / "pki")
        self._admin = self.pki.client(pki.ADMIN, ["system:masters"])
        cert, key = self._admin
        for name in ("etcd", "etcd-peer", "apiserver"):
            self.ports[name] = free_port()
        pki.write_kubeconfig(self.kubeconfig, pki.kubeconfig(self.url, self.pki.ca, cert, key, pki.ADMIN))
        # a short directory: a Unix socket's path is limited to 107 bytes
        self._sockdir = Path(tempfile.mkdtemp(prefix="hami-cp-"))
        self.egress = EgressProxy(self._sockdir / "egress.sock")
        self.kubelet = KubeletLogs(self.pod_logs, *self.pki.serving("kubelet"))
        self.egress.route(f"127.0.0.1:{self.kubelet.port}", self.kubelet.port)
        try:
            self._start_etcd()
            self._start_apiserver()
        except BaseException:
            self.stop()
            raise
        self._stopping.clear()
        self._reaper = threading.Thread(target=self._finish_deletions, name="pod-deletions", daemon=True)
        self._reaper.start()

    def stop(self) -> dict[str, int]:
        """Stops every child (kube-scheduler, kube-apiserver, etcd: newest first); their exit codes."""
        self._stopping.set()
        if self._reaper is not None:
            self._reaper.join(30)
            self._reaper = None
        codes = self.procs.stop()
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet = None
        if self.egress is not None:
            self.egress.stop()
            self.egress = None
            shutil.rmtree(self._sockdir, ignore_errors=True)
        return codes

    def _wait(self, child: Child, check: Any, what: str) -> None:
        def alive() -> None:
            if not child.alive():
                raise StartError(
                    f"{child.name} exited with status {child.proc.returncode} while starting; "
                    f"log {child.log}:\n{log_tail(child.log, 4000)}"
                )

        try:
            wait_until(check, self.ready_timeout, what, alive=alive, interval=0.2)
        except AssertionError as err:
            raise StartError(f"{err}; log {child.log}:\n{log_tail(child.log, 4000)}") from None

    def _start_etcd(self) -> None:
        assert self.binaries is not None
        client, peer = self.etcd_url, f"http://127.0.0.1:{self.ports['etcd-peer']}"
        argv = [
            str(self.binaries.etcd), "--name", "default", "--data-dir", str(self.work / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"default={peer}",
            # a test cluster on a shared 2-core machine: durability is not the point, latency is
            "--unsafe-no-fsync",
        ]  # fmt: skip
        self.etcd = self.procs.start("etcd", argv)
        self._wait(self.etcd, _http_ok(client + "/health"), "etcd's /health")

    def _apiserver_argv(self) -> list[str]:
        assert self.binaries is not None and self.pki is not None and self.egress is not None
        egress = self.work / "egress-selector.yaml"
        egress.write_text(egress_config(self.egress.path), encoding="utf-8")
        p = self.pki
        return [
            str(self.binaries.kube_apiserver),
            "--etcd-servers", self.etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(self.ports["apiserver"]),
            "--tls-cert-file", str(p.apiserver_cert), "--tls-private-key-file", str(p.apiserver_key),
            "--client-ca-file", str(p.ca),
            "--service-account-key-file", str(p.sa_pub),
            "--service-account-signing-key-file", str(p.sa_key),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range", pki.SERVICE_CIDR,
            # the `kubernetes` Service's Endpoints may not hold a loopback address: none are written
            "--endpoint-reconciler-type", "none",
            "--authorization-mode", "Node,RBAC",
            "--allow-privileged=true",  # the device plugin's and the monitor's DaemonSets
            "--disable-admission-plugins", ",".join(DISABLED_ADMISSION),
            "--egress-selector-config-file", str(egress),
            "--profiling=false",
            *self.apiserver_args,
        ]  # fmt: skip

    def _start_apiserver(self) -> None:
        self.apiserver = self.procs.start("kube-apiserver", self._apiserver_argv())
        with self.session() as s:
            self._wait(self.apiserver, _http_ok(self.url + "/readyz", s), "kube-apiserver's /readyz")
            # the namespaces the tests and the chart use exist once the bootstrap controller ran
            system = _http_ok(self.url + "/api/v1/namespaces/kube-system", s)
            self._wait(self.apiserver, system, "namespace kube-system")

    def restart_apiserver(self, while_down: Callable[[], None] | None = None) -> None:
        """SIGTERM kube-apiserver, wait for it to exit, run ``while_down`` (etcd alone is up), start
        it again on the same port and data."""
        assert self.apiserver is not None
        self.stop_child(self.apiserver, grace=60)
        if while_down is not None:
            while_down()
        self._start_apiserver()

    def wait_http(self, child: Child, url: str, what: str) -> None:
        """Until ``url`` answers 200; a StartError with ``child``'s log if it exits or time runs out."""
        self._wait(child, _http_ok(url), what)

    def start_kube_scheduler(
        self, config_yaml: str, user: str = pki.KUBE_SCHEDULER, groups: Sequence[str] = ()
    ) -> Child:
        """kube-scheduler with ``config_yaml`` (a KubeSchedulerConfiguration; its clientConnection is
        set here to ``user``'s kubeconfig) on a free loopback port; returns once it is healthy."""
        assert self.binaries is not None
        kubeconfig = self.kubeconfig_for(user, groups)
        config = self.work / "kube-scheduler.yaml"
        config.write_text(schedconfig.with_kubeconfig(config_yaml, kubeconfig), encoding="utf-8")
        self.ports["kube-scheduler"] = port = free_port()
        cert, key = self._pki().serving("kube-scheduler")
        argv = [
            str(self.binaries.kube_scheduler), "--config", str(config),
            "--authentication-kubeconfig", str(kubeconfig), "--authorization-kubeconfig", str(kubeconfig),
            "--bind-address", "127.0.0.1", "--secure-port", str(port),
            "--tls-cert-file", str(cert), "--tls-private-key-file", str(key),
        ]  # fmt: skip
        self.kube_scheduler = child = self.procs.start("kube-scheduler", argv)
        with requests.Session() as s:
            s.trust_env = False
            s.verify = str(self._pki().ca)
            self._wait(child, _http_ok(f"https://127.0.0.1:{port}/healthz", s), "kube-scheduler's /healthz")
        return child

    def start_proxy(self, port: int = 0) -> str:
        """``kubectl proxy`` on 127.0.0.1:``port`` (0: a free one) as the admin: the API in plain
        HTTP for the stand-ins that speak no TLS (kube-state-metrics, the kubelet stand-in). Its URL."""
        assert self.binaries is not None
        port = port or free_port()
        argv = [
            str(self.binaries.kubectl), "--kubeconfig", str(self.kubeconfig), "proxy",
            "--address=127.0.0.1", f"--port={port}",
        ]  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        self.wait_http(self.procs.start(f"kubectl-proxy-{port}", argv), url + "/api", "kubectl proxy")
        return url

    def stop_kube_scheduler(self) -> int | None:
        child, self.kube_scheduler = self.kube_scheduler, None
        return None if child is None else self.stop_child(child)

    def stop_child(self, child: Child, grace: float = 30.0) -> int:
        """SIGTERM one child (SIGKILL after ``grace`` s) and forget it; its exit code."""
        if child.alive():
            child.proc.terminate()
        try:
            code = child.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            child.proc.kill()
            code = child.proc.wait(timeout=grace)
        self.procs.children.remove(child)
        return code

    def _finish_deletions(self, interval: float = 0.5) -> None:
        """What a kubelet does once a pod on its node is being deleted (deletionTimestamp set): the
        containers are gone, so the pod is deleted for good (grace period 0, this uid only).
        Without it, a deleted pod of a node stays Terminating and keeps its GPUs."""
        with self.session() as s:
            while not self._stopping.wait(interval):
                try:
                    reply = s.get(self.url + "/api/v1/pods", timeout=10)
                    items = reply.json().get("items") or [] if reply.status_code == 200 else []
                    for pod in items:
                        meta = pod["metadata"]
                        if not meta.get("deletionTimestamp") or not pod["spec"].get("nodeName"):
                            continue
                        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
                        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
                        s.delete(self.url + path, json=body, timeout=10)
                except (requests.RequestException, ValueError):
                    continue  # kube-apiserver restarting or stopping: the next round tries again

    # ---- cluster operations ----

    def compact_etcd(self) -> int:
        """etcd's history compacted up to now (what kube-apiserver does every 5 minutes): a watch or
        a list continuing from an older resourceVersion then gets 410 Gone. The revision compacted."""
        with requests.Session() as s:
            s.trust_env = False
            # etcd's JSON gateway: any range answers with the current revision in its header
            head = s.post(self.etcd_url + "/v3/kv/range", json={"key": "AA=="}, timeout=30)
            head.raise_for_status()
            revision = int(head.json()["header"]["revision"])
            done = s.post(
                self.etcd_url + "/v3/kv/compaction", json={"revision": revision, "physical": True}, timeout=60
            )
            done.raise_for_status()
        return revision

    def kubectl(
        self, *args: str, input: str | None = None, timeout: float = 120.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """The built kubectl as the admin user; raises with its output when ``check`` and it fails."""
        assert self.binaries is not None
        argv = [str(self.binaries.kubectl), "--kubeconfig", str(self.kubeconfig), *args]
        out = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, check=False)
        if check and out.returncode != 0:
            said = f"{out.stdout}{out.stderr}"
            raise AssertionError(f"kubectl {' '.join(args)} exited {out.returncode}:\n{said}")
        return out

    def create_node(self, node: Obj, gpus: int = 0) -> Obj:
        """``node`` created through the API as a kubelet registers one, then its status made Ready
        and schedulable (allocatable CPU, memory, pods and ``gpus`` ``nvidia.com/gpu``; resources in
        ``node``'s own status win), its kubelet endpoint the log server's."""
        name = node["metadata"]["name"]
        status = nodes.ready_status(gpus)
        own = node.get("status") or {}
        for key in ("capacity", "allocatable"):
            status[key] = {**status[key], **(own.get(key) or {})}
        if self.kubelet is not None:
            status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.kubelet.port}}
        with self.session() as s:
            body = {k: v for k, v in node.items() if k != "status"}
            created = s.post(self.url + "/api/v1/nodes", json=body, timeout=30)
            if created.status_code != 201:
                raise AssertionError(f"creating node {name}: {created.status_code} {created.text}")
            ready = s.patch(
                f"{self.url}/api/v1/nodes/{name}/status",
                json={"status": status},
                headers={"Content-Type": "application/merge-patch+json"},
                timeout=30,
            )
            if ready.status_code != 200:
                raise AssertionError(f"status of node {name}: {ready.status_code} {ready.text}")
            result: Obj = ready.json()
            return result

    def route_service(self, namespace: str, name: str, port: int, local_port: int) -> str:
        """kube-apiserver's calls to Service ``namespace/name``:``port`` reach 127.0.0.1:``local_port``;
        returns the ClusterIP:port it dials."""
        assert self.egress is not None
        with self.session() as s:
            reply = s.get(f"{self.url}/api/v1/namespaces/{namespace}/services/{name}", timeout=30)
            reply.raise_for_status()
        target = f"{reply.json()['spec']['clusterIP']}:{port}"
        self.egress.route(target, local_port)
        return target


def _http_ok(url: str, session: requests.Session | None = None) -> Any:
    def check() -> bool:
        try:
            getter = session.get if session is not None else requests.get
            return getter(url, timeout=5).status_code == 200
        except requests.RequestException:
            return False

    return check
