"""The whole product on one machine: the processes of ``make demo`` and of the integration tests.

Start order: Kubernetes API emulator or, with ``control_plane="real"``, the real control plane
(``controlplane/stackkube.py``), seeded with ``hami.testing.cluster``; kube-state-metrics
stand-in, simulated GPU node with the vGPU monitor, device plugin, scheduler extender, Alertmanager,
Prometheus. With the scenarios, a second simulated GPU node, driver-node, runs its own monitor, kubelet
stand-in and device plugin, the plugin with ``--memory-enforcement driver``. ``stop()`` ends them in
reverse order. Every wait has a deadline; a child that exits early fails the start with the tail of
its log. What it runs with is ``hami.demo.options``;
Prometheus's and Alertmanager's configuration is ``hami.demo.monitoring``'s; fragmented-node's
plugin registration, ``hami.demo.registration``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from hami.core import names
from hami.demo import jaeger, monitoring, promconfig
from hami.demo.config import chart_flags, demo_values, node_config_json
from hami.demo.monitoring import ALERTMANAGER
from hami.demo.options import DEVICE_PLUGIN, MONITOR, SCHEDULER, StackOptions, installed
from hami.demo.registration import HandshakeReporter
from hami.testing import chart, cluster, dashqueries, install
from hami.testing.controlplane.stackkube import RealKube
from hami.testing.kubeapi import SERVING
from hami.testing.kubeapi.logs import log_path
from hami.testing.processes import ProcessGroup, StartError, free_port, http_ok, port_problem
from hami.testing.prometheus import PROMETHEUS
from hami.testing.wait import wait_until


class Stack:
    def __init__(self, opts: StackOptions) -> None:
        self.opts = opts
        self.work = opts.workdir
        self.procs = ProcessGroup(self.work / "logs")
        self.ports: dict[str, int] = {}
        self.running: list[str] = []
        self.kubeconfig = self.work / "kubeconfig"
        self.notifications = self.work / "notifications.log"
        self.pod_logs = self.work / "pod-logs"  # what `kubectl logs` reads (the emulator's --log-dir)
        # sim-node's filesystem: the device plugin's HOOK_PATH (HAMi-core in <it>/vgpu, the monitor's
        # HOOK_PATH, as the chart mounts them) and the host /proc the monitor maps GPU processes with
        self.hook_path = self.work / "hook"
        self.proc_root = self.work / "proc"
        self.driver_work = self.work / cluster.DRIVER_NODE  # driver-node's filesystem, laid out the same
        self.chart = install.Installed()
        self._reporter: HandshakeReporter | None = None
        self.real: RealKube | None = None

    # ---- addresses ----

    def addr(self, name: str) -> str:
        """The address ``name`` listens on."""
        return f"{self.opts.host}:{self.ports[name]}"

    def reach(self, name: str) -> str:
        """The address to reach ``name`` at from this machine (a wildcard bind through loopback)."""
        host = "127.0.0.1" if self.opts.host in ("", "0.0.0.0") else self.opts.host
        return f"{host}:{self.ports[name]}"

    def url(self, name: str) -> str:
        return f"http://{self.reach(name)}"

    @property
    def kube_url(self) -> str:
        return self.url("kubeapi")

    def prometheus_page(self, page: str) -> str:
        """The URL of a Prometheus UI page that answers on this build."""
        return monitoring.prometheus_page(self.url("prometheus"), page)

    @property
    def driver_node(self) -> bool:
        """Whether driver-node's daemons run (with the scenarios)."""
        return self.opts.scenarios

    def metrics_targets(self) -> dict[str, list[str]]:
        """Scrape job -> addresses of every running daemon (driver-node's beside sim-node's)."""
        jobs = {
            MONITOR: promconfig.JOB_MONITOR,
            SCHEDULER: promconfig.JOB_SCHEDULER,
            DEVICE_PLUGIN: promconfig.JOB_DEVICE_PLUGIN,
        }
        driver = {MONITOR: "drivermonitor", DEVICE_PLUGIN: "driverplugin"}
        out = {jobs[c]: [self.reach(c)] for c in self.running}
        for c in self.running:
            if self.driver_node and c in driver:
                out[jobs[c]].append(self.reach(driver[c]))
        out[promconfig.JOB_KSM] = [self.reach("ksm")]
        return out

    # ---- lifecycle ----

    def _claim_ports(self) -> None:
        """Fixed ports must be free now (one clear line if not); 0 picks a free one."""
        problems = []
        for name, port in vars(self.opts.ports).items():
            if port == 0:
                self.ports[name] = free_port(self.opts.host)
                continue
            problem = port_problem(self.opts.host, port)
            if problem is not None:
                problems.append(f"{problem} (needed for {name}; choose another with --{name}-port)")
            self.ports[name] = port
        if problems:
            raise StartError("; ".join(problems))

    def start(self) -> None:
        missing = [c for c in self.opts.components if not installed(c)]
        if missing:
            raise StartError(f"not in this checkout: {', '.join(missing)}")
        for binary in (PROMETHEUS, ALERTMANAGER):
            if not Path(binary).exists():
                raise StartError(
                    f"{binary} is not installed (Debian packages prometheus, prometheus-alertmanager)"
                )
        self._claim_ports()
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            self._start_kubeapi()
            self._start_ksm()
            for component in self.opts.components:
                starts = {
                    MONITOR: self._start_monitor,
                    SCHEDULER: self._start_scheduler,
                    DEVICE_PLUGIN: self._start_deviceplugin,
                }
                starts[component]()
                self.running.append(component)
            self._start_alertmanager()
            self._start_prometheus()
            if SCHEDULER in self.opts.components:
                self._start_kube_scheduler()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> dict[str, int]:
        self.running.clear()
        if self._reporter is not None:
            self._reporter.stop()
        codes = self.procs.stop()
        if self.real is not None:
            self.real.stop()  # kube-scheduler, kubectl proxy, kube-apiserver, etcd
        return codes

    def _wait(self, check_url: str, what: str) -> None:
        self._wait_for(http_ok(check_url), what)

    def _wait_for(self, check: Callable[[], object], what: str) -> None:
        """Until ``check()`` holds; a child that exits meanwhile fails the start at once."""
        wait_until(check, self.opts.ready_timeout, what, alive=self.procs.check_alive, interval=0.2)

    # ---- children ----

    def _start_kubeapi(self) -> None:
        seeded = cluster.objects(self.opts.gpus, datetime.now().astimezone(), self.opts.scenarios)
        if self.opts.control_plane == "real":
            self.real = RealKube(self.work, self.ports["kubeapi"], self.pod_logs, self.opts.ready_timeout)
            self.real.start(self.kubeconfig)
            self.real.seed(seeded)
        else:
            self._start_emulator(seeded)
        self._install_chart([o for o in seeded if o["kind"] == "Node"])
        if self.opts.scenarios:
            # fragmented-node runs no device plugin process: its registration is stood in for
            self._reporter = HandshakeReporter(self.kube_url, cluster.FRAG_NODE)
            self._reporter.start()

    def _start_emulator(self, seeded: list[dict[str, Any]]) -> None:
        child = self.procs.python(
            "kubeapi",
            "hami.testing.kubeapi",
            [
                "--host",
                self.opts.host,
                "--port",
                str(self.ports["kubeapi"]),
                "--kubeconfig",
                str(self.kubeconfig),
                "--log-dir",
                str(self.pod_logs),
            ],
        )
        self.procs.wait_for_log(child, SERVING, self.opts.ready_timeout, "the kube API emulator")
        cluster.seed(self.kube_url, seeded)

    def _install_chart(self, nodes: list[dict[str, Any]]) -> None:
        """The Helm chart, rendered with the production template, installed in the emulator, its
        pods standing for the daemons this stack runs: `kubectl get pods -n kube-system -l
        app=hami-scheduler` lists them and `kubectl logs` reads the daemons' logs."""
        demo = self.work / "demo-values.yaml"
        demo.write_text(yaml.safe_dump(demo_values(self.opts.scenarios)), encoding="utf-8")
        values = [chart.EXAMPLES / "production.yaml", demo]
        if self.real is not None:
            self.chart = self.real.install_chart(nodes, values)
        else:
            self.chart = install.install_over_http(self.kube_url, chart.render(values), nodes)
        # container -> the log of the process standing in for it (on the node the daemons run as)
        stand_ins = {
            names.EXTENDER_CONTAINER: "scheduler",
            names.DEVICE_PLUGIN_CONTAINER: "device-plugin",
            names.MONITOR_CONTAINER: "simnode-monitor",
        }
        for pod in [p for pods in self.chart.pods.values() for p in pods]:
            if pod["spec"]["nodeName"] != cluster.NODE and pod is not self.scheduler_pod:
                continue
            for container in pod["spec"]["containers"]:
                process = stand_ins.get(container["name"])
                if process is None:
                    continue
                link = log_path(self.pod_logs, names.NAMESPACE, pod["metadata"]["name"], container["name"])
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(self.procs.log_dir / f"{process}.log")

    @property
    def scheduler_pod(self) -> dict[str, Any] | None:
        """The scheduler replica the extender stands for (the first by name, as `.items[0]`)."""
        pods = self.chart.pods.get(names.SCHEDULER_DEPLOYMENT) or []
        return min(pods, key=lambda p: str(p["metadata"]["name"])) if pods else None

    def _start_ksm(self) -> None:
        self.procs.python(
            "kube-state-metrics", "hami.demo.ksm", ["--api", self.kube_url, "--bind", self.addr("ksm")]
        )
        self._wait(self.url("ksm") + "/metrics", "the kube-state-metrics stand-in")

    def _simhost_args(self, work: Path, port: str, gpus: int) -> list[str]:
        return [
            "--kubeconfig", str(self.kubeconfig),
            "--hook-path", str(work / "hook" / "vgpu"),
            "--proc-root", str(work / "proc"),
            "--cgroup-root", str(work / "cgroup"),
            "--runtime-dir", str(work / "runtime"),
            "--bind", self.addr(port),
            "--gpus", str(gpus),
            "--interval", str(self.opts.sim_interval),
        ]  # fmt: skip

    def _start_monitor(self) -> None:
        args = self._simhost_args(self.work, MONITOR, self.opts.gpus)
        if self.opts.scenarios:
            args += ["--scenarios", "--xid-every", str(self.opts.xid_every)]
            args += ["--leak-rate", str(self.opts.leak_rate)]
        flags, env = jaeger.daemon_tracing(self.opts.tracing)
        self.procs.python("simnode-monitor", "hami.demo.simhost", args + flags, env=env)
        self._wait(self.url(MONITOR) + "/metrics", "the simulated node's monitor")
        if self.driver_node:
            args = self._simhost_args(self.driver_work, "drivermonitor", cluster.DRIVER_GPUS)
            args += ["--node", cluster.DRIVER_NODE]
            self.procs.python("drivernode-monitor", "hami.demo.simhost", args + flags, env=env)
            self._wait(self.url("drivermonitor") + "/metrics", "driver-node's monitor")

    def _start_scheduler(self) -> None:
        if self.real is not None:  # the chart's arguments: TLS, the webhook, leader election
            ports = {"extender": self.ports["extender"], "metrics": self.ports[SCHEDULER]}
            lock = ["--node-lock-timeout", self.opts.node_lock_timeout] if self.opts.node_lock_timeout else []
            self.real.start_extender(self.procs, "scheduler", ports, lock)
            return
        args = [
            "--http_bind", self.addr("extender"),
            "--metrics-bind-address", self.addr(SCHEDULER),
            "--scheduler-name", cluster.SCHEDULER_NAME,
            "--kubeconfig", str(self.kubeconfig),
        ]  # fmt: skip
        if self.opts.node_lock_timeout:
            args += ["--node-lock-timeout", self.opts.node_lock_timeout]
        pod = self.scheduler_pod
        args[:0] = [] if pod is None else chart_flags(pod)  # the later --node-lock-timeout wins
        env = {} if pod is None else install.downward_env(pod, names.EXTENDER_CONTAINER)
        flags, traced = jaeger.daemon_tracing(self.opts.tracing)
        self.procs.python("scheduler", "hami.scheduler", args + flags, env={**env, **traced})
        self._wait(self.url(SCHEDULER) + "/metrics", "the scheduler extender's metrics")
        self._wait(self.url("extender") + "/healthz", "the scheduler extender")

    def _start_kube_scheduler(self) -> None:
        """Pods are scheduled only once Prometheus holds the extender's counters at 0, as in a cluster
        whose scheduler ran before anything happened: the lock broken at the first bind on
        locked-node is then an increase (HAMiNodeLockExpired), not a series born at 1."""
        expired = "hami_scheduler_node_lock_expired_total"
        self._wait_for(
            lambda: dashqueries.Prometheus(self.url("prometheus")).query(expired),
            "Prometheus's first scrape of the scheduler extender",
        )
        if self.real is not None:  # the real kube-scheduler schedules; the stand-in only churns
            self.real.start_kube_scheduler()
        args = [
            "--api", self.kube_url,
            "--extender", "" if self.real is not None else self.url("extender"),
            "--interval", str(self.opts.schedule_every),
            "--churn-every", str(self.opts.churn_every),
            *(["--admit"] if self.opts.tracing else []),  # their traces start at the webhook
        ]  # fmt: skip
        child = self.procs.python("kube-scheduler", "hami.demo.kubesched", args)
        # its SIGTERM handler is in place once it says so: a stop before that would kill it (-15)
        self.procs.wait_for_log(child, r"kubesched: driving", self.opts.ready_timeout, "the stand-in's start")

    def _start_deviceplugin(self) -> None:
        node_config = self.work / "deviceplugin-node-config.json"
        node_config.write_text(node_config_json(self.opts.scenarios), encoding="utf-8")
        nvml = cluster.write_fake_nvml_spec(
            self.work / "fake-nvml.yaml", self.opts.gpus, self.opts.scenarios, self.opts.xid_every
        )
        self._start_node_plugin(cluster.NODE, self.work, nvml, node_config, port=DEVICE_PLUGIN)
        if self.driver_node:
            work = self.driver_work
            work.mkdir(parents=True, exist_ok=True)
            index = cluster.NODE_INDEX[cluster.DRIVER_NODE]
            spec = work / "fake-nvml.yaml"
            nvml = cluster.write_fake_nvml_spec(spec, cluster.DRIVER_GPUS, False, 0.0, index)
            driver = ["--memory-enforcement", "driver"]
            node = cluster.DRIVER_NODE
            self._start_node_plugin(node, work, nvml, node_config, port="driverplugin", extra=driver)

    def _start_node_plugin(
        self, node: str, work: Path, nvml: Path, node_config: Path, *, port: str, extra: Sequence[str] = ()
    ) -> None:
        """One node's kubelet stand-in and device plugin, their files under ``work``."""
        prefix = "" if node == cluster.NODE else f"{node}-"  # sim-node's keep their log names
        plugin_dir = work / "device-plugins"
        plugin_dir.mkdir(parents=True, exist_ok=True)
        kubelet = self.procs.python(
            f"{prefix}kubelet",
            "hami.testing.kubelet",
            ["--dir", str(plugin_dir), "--api", self.kube_url, "--node", node,
             "--runtime-dir", str(work / "runtime")],
        )  # fmt: skip
        ready = self.opts.ready_timeout
        self.procs.wait_for_log(kubelet, "kubelet stand-in serving", ready, f"{node}'s kubelet stand-in")
        args = [
            "--node-name", node,
            "--nvml", "fake",
            "--fake-nvml-spec", str(nvml),
            "--device-plugin-path", str(plugin_dir),
            "--hook-path", str(work / "hook"),
            "--vgpu-lock-dir", str(work / "vgpulock"),
            "--mig-apply-lock", str(work / "mig-apply.lock"),
            "--node-config-file", str(node_config),
            "--device-split-count", str(cluster.SPLIT_COUNT),
            "--metrics-bind-address", self.addr(port),
            "--kubeconfig", str(self.kubeconfig),
            *extra,
        ]  # fmt: skip
        flags, env = jaeger.daemon_tracing(self.opts.tracing)
        self.procs.python(f"{prefix}device-plugin", "hami.deviceplugin", args + flags, env=env)
        self._wait(self.url(port) + "/metrics", f"{node}'s device plugin")

    def _start_alertmanager(self) -> None:
        self.procs.python(
            "alertsink",
            "hami.demo.alertsink",
            ["--bind", self.addr("alertsink"), "--out", str(self.notifications)],
        )
        self._wait_for(self.notifications.exists, "the alert sink")
        argv = monitoring.alertmanager_argv(
            self.work,
            self.addr("alertmanager"),
            self.url("alertmanager"),
            self.url("alertsink") + "/",
            self.fast,
        )
        self.procs.start("alertmanager", argv)
        self._wait(self.url("alertmanager") + "/-/ready", "Alertmanager")

    @property
    def fast(self) -> bool:
        return promconfig.seconds(self.opts.scrape_interval) < 5

    def _start_prometheus(self) -> None:
        argv = monitoring.prometheus_argv(
            self.work,
            self.addr("prometheus"),
            self.url("prometheus"),
            targets=self.metrics_targets(),
            rules=self.opts.rules,
            alertmanager=self.reach("alertmanager"),
            scrape_interval=self.opts.scrape_interval,
            evaluation_interval=self.opts.evaluation_interval,
        )
        self.procs.start("prometheus", argv)
        self._wait(self.url("prometheus") + "/-/ready", "Prometheus")
