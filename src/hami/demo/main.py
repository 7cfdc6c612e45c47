"""``make demo`` (``python -m hami.demo``): the whole product on a simulated cluster.

Starts the Kubernetes API emulator with a simulated GPU cluster, the simulated node with the vGPU
monitor (:9394), the scheduler extender (metrics :9395), the device plugin (:9396), a
kube-state-metrics stand-in, Debian's Prometheus (:9090) with alerts/hami-rules.yaml, and Debian's
Alertmanager (:9093). The Helm chart, rendered with the production template, is installed in the
emulator, its pods standing for the daemons, so the guides' `kubectl` commands work against it.
Prints the URLs, the dashboards to import into Grafana and the `helm` lines for a real cluster, runs
until Ctrl-C, then stops everything. Logs and data live under ``.demo/`` (removed at the next start).
``--helm`` prints only the `helm` lines. ``--tracing`` (or ``HAMI_DEMO_TRACING=1 make demo``) also
starts Jaeger all-in-one (built from the Go module proxy at the first use, ``hami.demo.jaeger``)
and runs the three daemons with ``--enable-tracing`` into it; the banner prints where to look.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
from pathlib import Path

from hami.core import names
from hami.core.duration import prometheus_duration_flag
from hami.demo import jaeger
from hami.demo.monitoring import DASHBOARDS
from hami.demo.options import DEVICE_PLUGIN, MODULES, MONITOR, SCHEDULER, Ports, StackOptions, installed
from hami.demo.stack import Stack
from hami.testing import chart, cluster
from hami.testing.controlplane.build import BuildError
from hami.testing.processes import StartError
from hami.testing.wait import WaitTimeout

COMPONENTS = (MONITOR, SCHEDULER, DEVICE_PLUGIN)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hami.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    d = Ports()
    p.add_argument(
        "--workdir", type=Path, default=Path(".demo"), help="logs, data, sockets (default %(default)s)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address every listener binds (default %(default)s)")
    for name, default in vars(d).items():
        p.add_argument(
            f"--{name}-port", type=int, default=default, help=f"0 = any free port (default {default})"
        )
    p.add_argument("--gpus", type=int, default=4, help="GPUs on the simulated node (default %(default)s)")
    p.add_argument(
        "--scrape-interval",
        type=prometheus_duration_flag,
        default="5s",
        help="Prometheus scrape/evaluation interval, a Prometheus duration (default %(default)s)",
    )
    p.add_argument("--no-scenarios", action="store_true",
                   help="no stale node, pending pod, over-limit container, GPU faults, XIDs, over-commit or"
                   " fragmented node")  # fmt: skip
    p.add_argument("--helm", action="store_true", help="print the helm lines for a real cluster and exit")
    p.add_argument(
        "--tracing",
        action="store_true",
        default=os.environ.get("HAMI_DEMO_TRACING", "") not in ("", "0"),
        help="start Jaeger and trace every GPU pod into it (default $HAMI_DEMO_TRACING)",
    )
    p.add_argument(
        "--control-plane",
        choices=("emulator", "real"),
        default=os.environ.get("HAMI_CONTROL_PLANE") or "emulator",
        help="the API emulator (quick), or a real etcd, kube-apiserver and kube-scheduler built from "
        "k8s.io/kubernetes (the first build takes about half an hour; $HAMI_CONTROL_PLANE; "
        "default %(default)s)",
    )
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=COMPONENTS,
        help="do not start this daemon (repeatable)",
    )
    return p


def options(args: argparse.Namespace) -> StackOptions:
    ports = Ports(**{name: getattr(args, f"{name}_port") for name in vars(Ports())})
    wanted = tuple(c for c in COMPONENTS if c not in args.skip)
    return StackOptions(
        workdir=args.workdir.resolve(),
        host=args.host,
        ports=ports,
        scrape_interval=args.scrape_interval,
        evaluation_interval=args.scrape_interval,
        gpus=args.gpus,
        scenarios=not args.no_scenarios,
        components=wanted,
        control_plane=args.control_plane,
    )


def tool(name: str) -> str:
    """How to run one of hami's console scripts from this interpreter's environment."""
    script = Path(sys.executable).parent / name
    return str(script) if script.exists() else f"{sys.executable} -m hami.{name.removeprefix('hami-')}"


def commands(stack: Stack) -> list[str]:
    """The exact hami-doctor and hami-tune command lines for this demo cluster."""
    kube = f" --kubeconfig {stack.kubeconfig}"
    url = f" --scheduler-url {stack.url(SCHEDULER)}" if SCHEDULER in stack.running else ""
    doctor = tool("hami-doctor")
    # a running pod's GPU-limit walk reads the node's files: this machine is sim-node
    unlimited = f"{cluster.UNLIMITED.namespace}/{cluster.UNLIMITED.name}"
    out = [f"{doctor} pod scenarios/{cluster.PENDING}{kube}{url}"]
    if url:
        out.append(f"{doctor} nodes{kube}{url}")
    out.append(f"{doctor} pod {unlimited}{kube}{url} --hook-path {stack.hook_path}")
    if stack.driver_node:  # driver-node's files are under its own directory
        driver = f"scenarios/{cluster.DRIVER_LIMITED.name}"
        prom = f" --prometheus-url {stack.url('prometheus')}"
        out.append(f"{doctor} pod {driver}{kube}{url} --hook-path {stack.driver_work / 'hook'}{prom}")
    out += [
        f"{doctor} logs {stack.procs.log_dir}",
        # the demo's history is minutes long: a window the tuner accepts for it, and it says so
        f"{tool('hami-tune')} --prometheus-url {stack.url('prometheus')} --window 10m",
        # defrag plans through the scheduler's filter from the cluster: the pods' GPU type filters count
        f"{tool('hami-tune')} defrag{kube}",
    ]
    return out


def start_tracing(workdir: Path) -> jaeger.Jaeger:
    """Jaeger for ``--tracing``: built once (minutes, the first time), then started."""
    if jaeger.cached() is None:
        print(f"demo: building Jaeger {jaeger.VERSION} into {jaeger.cache_dir()} (once; minutes)...",
              flush=True)
    return jaeger.Jaeger(jaeger.build(), workdir / "jaeger").start()


def tracing_lines(backend: jaeger.Jaeger | None, kubeconfig: Path) -> list[str]:
    """Where the traces are: one per GPU pod created through the webhook (the batch pods)."""
    if backend is None:
        return []
    return [
        "",
        "Traces (--tracing): one per GPU pod, webhook to the monitor's first sight of its region:",
        f"  Jaeger              {backend.query_url}/search?service=hami-scheduler",
        "  exemplars           the scheduler dashboard's latency panels (dots), or Prometheus's "
        "/api/v1/query_exemplars: a slow bucket's trace ID",
        f"  a pod's trace ID    kubectl hami pod ml-batch/batch-job-0 --kubeconfig {kubeconfig}",
    ]


def banner(stack: Stack, skipped: list[str], backend: jaeger.Jaeger | None = None) -> str:
    titles = {
        MONITOR: "vGPU monitor",
        SCHEDULER: "scheduler extender",
        DEVICE_PLUGIN: "device plugin",
    }
    where = "a simulated cluster" if stack.real is None else "a real control plane with simulated nodes"
    lines = ["", f"HAMi demo is running on {where} (Ctrl-C stops it).", ""]
    lines.append(f"  Prometheus          {stack.prometheus_page('graph')}   (rules: {stack.opts.rules})")
    lines.append(f"    alerts            {stack.prometheus_page('alerts')}")
    lines.append(f"    targets           {stack.prometheus_page('targets')}")
    lines.append(f"  Alertmanager        {stack.url('alertmanager')}/#/alerts")
    lines.append(f"    notifications     {stack.notifications}   (tail -f; grouped and inhibited)")
    driver_ports = {MONITOR: "drivermonitor", DEVICE_PLUGIN: "driverplugin"}
    for c in stack.running:
        lines.append(f"  {titles[c]:<20}{stack.url(c)}/metrics")
        if c in driver_ports and stack.driver_node:  # the same daemon on driver-node, under its own
            lines.append(f"    on {cluster.DRIVER_NODE:<15}{stack.url(driver_ports[c])}/metrics")
    lines.append(f"  kube-state-metrics  {stack.url('ksm')}/metrics   (stand-in)")
    if stack.real is None:
        lines.append(f"  Kubernetes API      {stack.kube_url}   (KUBECONFIG={stack.kubeconfig})")
    else:
        lines.append(f"  kube-apiserver      {stack.real.cp.url}   (KUBECONFIG={stack.kubeconfig})")
        lines.append(f"    kubectl proxy     {stack.kube_url}   (plain HTTP, for the stand-ins)")
        logs = stack.real.cp.procs.log_dir
        lines.append(f"    kube-scheduler    the chart's configuration; logs in {logs}")
    for c in skipped:
        lines.append(f"  {titles[c]:<20}not started ({MODULES[c]} is not in this checkout, or --skip)")
    lines += ["", "Grafana: add a Prometheus data source at " + stack.url("prometheus") + ", then import:"]
    lines += [f"  {path}" for path in sorted(DASHBOARDS.glob("*.json"))]
    lines += ["", "Ask the doctor and the tuner about this cluster:"]
    lines += [f"  {line}" for line in commands(stack)]
    lines += tracing_lines(backend, stack.kubeconfig)
    lines += [
        "",
        "Scenarios (alerts fire once their `for:` durations, 0-15 minutes, have passed; over-commit needs"
        " a few minutes of growth more):",
        f"  node {cluster.STALE_NODE}: expired handshake and no allocatable GPU (the scheduler drops it)",
        f"  node {cluster.LOCKED_NODE}: expired lock of a crashed bind, broken and held again until"
        f" --node-lock-timeout ({stack.opts.node_lock_timeout or '5m'}): HAMiNodeLockHeldTooLong fires,"
        " then resolves as the lock expires (the doctor's warning turns to info)",
        f"  pod scenarios/{cluster.PENDING}: stays Pending",
        f"  node {cluster.FRAG_NODE}: {cluster.FRAG_GPUS} L4s with 1.5 GiB free each; pod"
        f" scenarios/{cluster.FRAG_PENDING} asks for an L4 with {cluster.FRAG_REQUEST_MIB // 1024} GiB and"
        " stays Pending (fragmentation)",
        f"  pod scenarios/{cluster.OVERLIMIT.name}: uses more than its vGPU memory limit",
        f"  pod notebooks/{cluster.IDLE.name}: no kernel for two hours (idle vGPU)",
        f"  pod {cluster.UNLIMITED.namespace}/{cluster.UNLIMITED.name}: CUDA_DISABLE_CONTROL=true, its GPU"
        " process runs without HAMi-core (not limited)",
        f"  node {cluster.DRIVER_NODE}: its device plugin runs --memory-enforcement driver; pod"
        f" scenarios/{cluster.DRIVER_LIMITED.name} asks for it (hami.io/memory-enforcement: driver), the"
        " driver limits its memory, HAMi-core its cores (both sources shown)",
        f"  pod scenarios/{cluster.SHIM_UNDERREPORTS.name}: HAMi-core reports less than the driver accounts"
        " (HAMiVGPUShimUnderReports)",
        f"  GPU {cluster.gpu_uuid(0, stack.opts.gpus - 1)}: XID 79 every {stack.opts.xid_every:.0f}s"
        " (monitor and device plugin)",
    ]
    if stack.opts.gpus > cluster.OVERCOMMIT_GPU:
        lines.append(
            f"  GPU {cluster.gpu_uuid(0, cluster.OVERCOMMIT_GPU)}: over-committed (node {cluster.NODE}"
            f" registers deviceMemoryScaling {cluster.MEMORY_SCALING}); pod scenarios/{cluster.LEAKY.name}"
            f" leaks {stack.opts.leak_rate:g} MiB/s towards physical exhaustion"
        )
    if stack.opts.gpus >= 2:  # the faults of cluster.fake_nvml_spec
        lines += [
            f"  GPU {cluster.gpu_uuid(0, stack.opts.gpus - 1)}: a failed row remap (drain and reset it)",
            f"  GPU {cluster.gpu_uuid(0, stack.opts.gpus - 2)}: {cluster.SLOWDOWN_C - 3} °C, clocks held back"
            " by a thermal slowdown",
        ]
    target = "the emulator" if stack.real is None else "the control plane"
    lines += ["", f"The Helm chart is installed in {target}, so the guides' commands work here:"]
    lines += kubectl_lines(stack)
    lines += ["", "On a real cluster:", *helm_lines(), ""]
    lines += [f"Logs: {stack.procs.log_dir}", ""]
    return "\n".join(lines)


def helm_lines() -> list[str]:
    """The same product on a real cluster, from the chart (paths relative to the checkout)."""
    values = chart.EXAMPLES.relative_to(chart.ROOT) / "production.yaml"
    where = f"{chart.CHART.relative_to(chart.ROOT)} -n {names.NAMESPACE} -f {values}"
    return [
        f"  helm install {names.RELEASE} {where}",
        f"  helm template {names.RELEASE} {where}   # the manifests only",
    ]


def kubectl_lines(stack: Stack) -> list[str]:
    pod = stack.scheduler_pod
    lines = [
        f"  export KUBECONFIG={stack.kubeconfig}",
        f"  kubectl get pods -n {names.NAMESPACE} -l {names.selector(names.SCHEDULER_APP)}",
        f"  kubectl get ds -n {names.NAMESPACE}",
    ]
    if pod is not None:
        lines.append(f"  kubectl logs -n {names.NAMESPACE} {pod['metadata']['name']} --tail=20")
    return lines


MARKER = ".hami-demo"


def reset_workdir(workdir: Path) -> str | None:
    """Empties a previous run's directory; refuses (returns why) to clear one the demo did not make."""
    if workdir.exists():
        if any(workdir.iterdir()) and not (workdir / MARKER).exists():
            return f"{workdir} exists and is not a demo directory (no {MARKER}); choose another --workdir"
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    (workdir / MARKER).write_text("created by python -m hami.demo; emptied at each start\n", encoding="utf-8")
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.helm:
        print("\n".join(["On a real cluster:", *helm_lines()]))
        return 0
    opts = options(args)
    absent = [c for c in opts.components if not installed(c)]
    opts.components = tuple(c for c in opts.components if c not in absent)
    skipped = [c for c in COMPONENTS if c not in opts.components]
    problem = reset_workdir(opts.workdir)
    if problem is not None:
        print(f"demo: {problem}", file=sys.stderr)
        return 1
    stack = Stack(opts)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    backend = None
    try:
        if args.tracing:
            backend = start_tracing(opts.workdir)
            opts.tracing = backend.otlp_endpoint
        stack.start()
    except (StartError, WaitTimeout, BuildError, jaeger.JaegerBuildError) as err:
        print(f"demo: {err}", file=sys.stderr)
        if backend is not None:
            backend.stop()
        return 1
    print(banner(stack, skipped, backend), flush=True)
    code = 0
    while not done.wait(1.0):
        try:
            stack.procs.check_alive()
        except StartError as err:
            print(f"demo: {err}", file=sys.stderr)
            code = 1
            break
    print("demo: stopping...", flush=True)
    stack.stop()
    if backend is not None:
        backend.stop()
    print("demo: stopped.", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
