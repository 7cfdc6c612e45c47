"""The extender driven by the real kube-scheduler and the real kube-apiserver (``--real``).

Run: PYTHONPATH=src python bench/bench_extender.py --real [--nodes 500] [--pods 1000]
     [--node-policy spread] [--workdir DIR]

One run on one control plane (``hami.testing.controlplane``: etcd, kube-apiserver and
kube-scheduler built from k8s.io/kubernetes): the chart applied server-side, its extender and
kube-scheduler as the chart runs them (the chart's KubeSchedulerConfiguration, mutual TLS),
``--nodes`` GPU nodes × 8 cards (T4, 15360 MiB, split 10) created Ready, and the device plugin's
stand-in (``controlplane.allocation``) finishing each bound pod as Allocate would. Two phases on
the same nodes with the same kube-scheduler binary and configuration:

- without the extender: ``--pods`` pods asking for CPU only (kube-scheduler does not call an
  extender for a pod that asks for none of its managedResources);
- through the extender: ``--pods`` GPU pods (one vGPU of 2048 MiB, 10 % of the cores), each filtered
  and bound by the extender (node lock, Binding with the allocation annotations, two events).

In each phase the pods are created while kube-scheduler is stopped, then it starts and schedules
the backlog as fast as it can: pods/s is measured from the first pod bound to the last, seen by a
watch. CPU per pod of each process (extender, kube-apiserver, kube-scheduler, etcd, and this
process: the watch and the device plugin's stand-in) is read from /proc/<pid>/stat, sampled every
100 ms and interpolated at the first and last bind. API requests per pod: kube-apiserver's own
``apiserver_request_total`` (every client) over the phase, and the extender's
``rest_client_requests_total``.

The reference, from the upstream scheduler performance harness (scheduler_perf) at 500 nodes:
kube-scheduler with one HTTP extender schedules about 111 pods/s, without one about 991 pods/s.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from prometheus_client import CollectorRegistry

from hami.core import names
from hami.core.kube.client import new_api_client
from hami.core.kube.informer import Informer
from hami.core.kube.options import KubeOptions
from hami.testing import builders
from hami.testing.controlplane import ETCD_VERSION, K8S_VERSION, ControlPlane, nodes
from hami.testing.controlplane.allocation import Allocations
from hami.testing.controlplane.deploy import Hami, install
from hami.testing.processes import cpu_seconds
from hami.testing.wait import wait_until

Obj = dict[str, Any]
UPSTREAM_WITH, UPSTREAM_WITHOUT = 111.0, 991.0  # scheduler_perf, 500 nodes
CARDS, CARD_MIB, SPLIT = 8, 15360, 10
BIND_WAIT_S = 1800.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench_extender.py --real")
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--pods", type=int, default=1000, help="pods per phase")
    p.add_argument("--node-policy", default="spread", help="the extender's --node-scheduler-policy")
    p.add_argument(
        "--kube-qps",
        default="-1",
        help="the extender's --kube-qps (default -1: no client-side limit; the chart's default, 5, "
        "caps its API writes at 5/s, so a few pods/s)",
    )
    p.add_argument("--workdir", type=Path, help="keep the logs here (default: a temporary directory)")
    return p.parse_args(argv)


class Sampler:
    """CPU seconds of named processes every ``interval`` s, interpolated at any moment."""

    def __init__(self, pids: Callable[[], dict[str, int]], interval: float = 0.1) -> None:
        self.pids = pids
        self.interval = interval
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            cpu = {}
            for name, pid in self.pids().items():
                try:
                    cpu[name] = cpu_seconds(pid)
                except OSError:
                    continue
            self.samples.append((now, cpu))
            self._stop.wait(self.interval)

    @contextmanager
    def running(self) -> Iterator[Sampler]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()

    def at(self, t: float, name: str) -> float:
        points = [(s, c[name]) for s, c in self.samples if name in c]
        before = [p for p in points if p[0] <= t] or points[:1]
        after = [p for p in points if p[0] >= t] or points[-1:]
        (t0, c0), (t1, c1) = before[-1], after[0]
        return c0 if t1 == t0 else c0 + (c1 - c0) * (t - t0) / (t1 - t0)


@dataclass
class Phase:
    label: str
    pods: int
    bound: dict[str, float] = field(default_factory=dict)  # pod name -> when the watch saw it bound
    cpu: dict[str, float] = field(default_factory=dict)  # seconds between the first and last bind
    api: dict[str, float] = field(default_factory=dict)  # kube-apiserver requests by verb class
    extender_requests: float = 0.0

    @property
    def rate(self) -> float:
        times = sorted(self.bound.values())
        return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0


def apiserver_requests(cp: ControlPlane) -> dict[str, float]:
    """kube-apiserver's ``apiserver_request_total``, summed by verb class."""
    with cp.session() as s:
        text = s.get(cp.url + "/metrics", timeout=60).text
    out = {"read": 0.0, "write": 0.0, "watch": 0.0}
    for m in re.finditer(r"^apiserver_request_total\{([^}]*)\} (\S+)$", text, re.MULTILINE):
        verb = re.search(r'verb="([A-Z]+)"', m.group(1))
        v = verb.group(1) if verb else ""
        kind = "watch" if v == "WATCH" else "read" if v in ("GET", "LIST") else "write"
        out[kind] += float(m.group(2))
    return out


def extender_requests(hami: Hami) -> float:
    text = requests.get(hami.metrics_url + "/metrics", timeout=60).text
    return sum(
        float(v) for v in re.findall(r"^rest_client_requests_total\{[^}]*\} (\S+)$", text, re.MULTILINE)
    )


def create_all(cp: ControlPlane, path: str, objects: list[Obj], status: Obj | None = None) -> None:
    """POST every object to ``path`` from 8 threads (then its ``status``, as a kubelet reports it)."""

    def one(obj: Obj) -> None:
        with cp.session() as s:
            reply = s.post(cp.url + path, json=obj, timeout=120)
            if reply.status_code != 201:
                raise RuntimeError(f"{path}: {reply.status_code} {reply.text}")
            if status is not None:
                name = obj["metadata"]["name"]
                done = s.patch(
                    f"{cp.url}{path}/{name}/status",
                    json={"status": status},
                    headers={"Content-Type": "application/merge-patch+json"},
                    timeout=120,
                )
                done.raise_for_status()

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, objects))


def gpu_nodes(count: int) -> list[Obj]:
    out = []
    for i in range(count):
        node = builders.gpu_node(f"node-{i:04d}", gpus=CARDS, mem=CARD_MIB, count=SPLIT)
        node["metadata"]["labels"] = {"kubernetes.io/hostname": node["metadata"]["name"]}
        node.pop("status")
        out.append(node)
    return out


def phase_pods(label: str, count: int, gpu: bool) -> list[Obj]:
    out = []
    for i in range(count):
        name = f"{label}-{i:05d}"
        if gpu:
            pod = builders.gpu_pod(name, mem=2048, cores=10)
            pod["spec"]["containers"][0]["image"] = "busybox"
        else:
            main = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}
            pod = builders.pod(main, name=name)
        pod["spec"]["schedulerName"] = names.SCHEDULER_DEPLOYMENT
        pod["metadata"]["labels"] = {"bench-phase": label}
        pod.pop("status")
        out.append(pod)
    return out


def run_phase(
    hami: Hami,
    watch: dict[str, Phase],
    label: str,
    *,
    gpu: bool,
    count: int,
    sampler: Sampler,
    settled: Callable[[], bool] = lambda: True,
) -> Phase:
    cp = hami.cp
    phase = Phase(label, count)
    cp.stop_kube_scheduler()
    started = time.monotonic()
    create_all(cp, "/api/v1/namespaces/default/pods", phase_pods(label, count, gpu))
    print(f"{label}: {count} pods created in {time.monotonic() - started:.1f}s", flush=True)
    watch[label] = phase
    api0, ext0 = apiserver_requests(cp), extender_requests(hami)
    hami.start_kube_scheduler()
    wait_until(lambda: len(phase.bound) >= count, BIND_WAIT_S, f"{label}: every pod bound", interval=0.2)
    first, last = min(phase.bound.values()), max(phase.bound.values())
    wait_until(settled, BIND_WAIT_S, f"{label}: every allocation done", interval=0.2)
    time.sleep(1.0)  # the last pods' events
    phase.cpu = {n: sampler.at(last, n) - sampler.at(first, n) for n in sampler.pids()}
    api1, ext1 = apiserver_requests(cp), extender_requests(hami)
    phase.api = {k: (api1[k] - api0[k]) / count for k in api0}
    phase.extender_requests = (ext1 - ext0) / count
    return phase


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so that the control plane's processes are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="bench-real-") as tmp:
        work = args.workdir or Path(tmp)
        with ControlPlane(work / "cp") as cp:
            return bench(cp, work, args)


def bench(cp: ControlPlane, work: Path, args: argparse.Namespace) -> int:
    started = time.monotonic()
    hami = install(cp, work / "chart")
    create_all(cp, "/api/v1/nodes", gpu_nodes(args.nodes), status=nodes.ready_status(CARDS * SPLIT))
    print(
        f"control plane: kube-apiserver, kube-scheduler {K8S_VERSION}, etcd {ETCD_VERSION}; "
        "the chart applied; "
        f"{args.nodes} nodes x {CARDS} GPUs in {time.monotonic() - started:.1f}s",
        flush=True,
    )
    hami.start_scheduler([f"--node-scheduler-policy={args.node_policy}", f"--kube-qps={args.kube_qps}"])
    watch: dict[str, Phase] = {}

    def seen(pod: Obj) -> None:
        phase = watch.get((pod["metadata"].get("labels") or {}).get("bench-phase", ""))
        if phase is not None and pod["spec"].get("nodeName"):
            phase.bound.setdefault(pod["metadata"]["name"], time.monotonic())

    registry = CollectorRegistry()
    client = new_api_client(
        KubeOptions(kubeconfig=str(cp.kubeconfig), qps=-1, timeout=60.0), registry=registry
    )
    informer = Informer(client, ("", "v1", "pods"), label_selector="bench-phase", registry=registry)
    informer.add_handler(seen, lambda _old, new: seen(new))
    informer.start()

    def pids() -> dict[str, int]:
        procs = {
            "extender": hami.extender,
            "kube-apiserver": cp.apiserver,
            "kube-scheduler": cp.kube_scheduler,
            "etcd": cp.etcd,
        }
        return {n: c.proc.pid for n, c in procs.items() if c is not None} | {"bench": os.getpid()}

    sampler = Sampler(pids)
    try:
        with Allocations(client) as done, sampler.running():
            without = run_phase(hami, watch, "plain", gpu=False, count=args.pods, sampler=sampler)
            through = run_phase(
                hami, watch, "gpu", gpu=True, count=args.pods, sampler=sampler,
                settled=lambda: done.count >= args.pods,
            )  # fmt: skip
            assert not done.errors, done.errors[:3]
    finally:
        informer.stop()
    report(args, without, through)
    return 0


def report(args: argparse.Namespace, without: Phase, through: Phase) -> None:
    n = args.pods
    print(
        f"real control plane, {args.nodes} nodes x {CARDS} GPUs, {n} pods per phase, "
        f"extender node policy {args.node_policy}, --kube-qps {args.kube_qps}, {os.cpu_count()} CPUs"
    )
    print(f"without the extender (CPU-only pods, same kube-scheduler and nodes): {without.rate:.0f} pods/s")
    print(
        f"through the extender (GPU pods, filter + bind): {through.rate:.0f} pods/s "
        f"({through.rate / without.rate:.3f}x of without)"
    )
    print(
        f"upstream scheduler_perf at 500 nodes: {UPSTREAM_WITH:.0f} pods/s with one HTTP extender, "
        f"{UPSTREAM_WITHOUT:.0f} without; ours: {through.rate / UPSTREAM_WITH:.2f}x of the first, "
        f"{through.rate / UPSTREAM_WITHOUT:.3f}x of the second (ours without: "
        f"{without.rate / UPSTREAM_WITHOUT:.3f}x)"
    )
    for phase in (through, without):
        cpu = ", ".join(f"{k} {v / n * 1000:.2f}" for k, v in phase.cpu.items())
        print(
            f"CPU ms per pod, {phase.label} (first bind to last): {cpu}; "
            f"total {sum(phase.cpu.values()) / n * 1000:.2f}"
        )
    for phase in (through, without):
        api = ", ".join(f"{k} {v:.2f}" for k, v in phase.api.items())
        print(
            f"kube-apiserver requests per pod, {phase.label} (every client): "
            f"{sum(phase.api.values()):.2f} ({api}); the extender's own: {phase.extender_requests:.2f}"
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
