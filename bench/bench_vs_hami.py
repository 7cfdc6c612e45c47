"""HAMi's scheduler extender against ours, in one run, through the same real kube-scheduler.

Run: PYTHONPATH=src python bench/bench_vs_hami.py [--hami-src PATH] [--nodes 500,1000] [--pods 200]
     [--rounds 2]

One real control plane (``hami.testing.controlplane``: etcd, kube-apiserver, kube-scheduler built from
k8s.io/kubernetes) per node count, ``N`` nodes × 8 GPUs registered in HAMi's annotation format. Both
extenders run from the start with the flags of HAMi's chart (``hami.testing.hamipeer``) and the
tuning guide's ``--kube-qps=50 --kube-burst=100``; each round starts kube-scheduler with the chart's
KubeSchedulerConfiguration pointing at one of them (HAMi's, then ours, alternating), creates the same
pods (one GPU, 1–8 GiB, ``node-scheduler-policy: spread``, so no two pods of a round wait on one
node's lock) and waits until every one is bound. Between rounds the pods are deleted and node locks
cleared (no device plugin runs to release them).

Printed per extender and as ours/HAMi:
- pods/s: pods created to all bound, wall clock;
- filter and bind latency p50/p99, measured by a pass-through proxy in front of each extender;
- extender CPU per pod (/proc/<pid>/stat, user+system) and its RSS at the end of the round;
- API requests per pod: the kube-apiserver's audit log, counted per extender's client user.

Targets: pods/s ≥ HAMi's; filter p99 ≤ HAMi's; CPU/pod ≤ 1.5 × HAMi's; requests/pod ≤ HAMi's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests
import yaml

from hami.core.codec.handshake import REPORTED, Handshake, format_handshake
from hami.testing import apiside, controlplane, hamipeer
from hami.testing.builders import limits
from hami.testing.cluster import gpu_node
from hami.testing.processes import ProcessGroup, cpu_seconds
from hami.testing.wait import wait_until

AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata"}]}  # fmt: skip
USERS = {"hami": "hami-extender-hami", "ours": "hami-extender-ours"}
# The tuning guide's client limits, for both: at client-go's default 5 QPS HAMi's first register
# pass over 1,000 nodes (a GET and a PATCH each) alone takes minutes.
KUBE_CLIENT = ("--kube-qps=50", "--kube-burst=100")


class TimingProxy:
    """Forwards POSTs to an extender and records each /filter and /bind's round trip."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.times: dict[str, list[float]] = {"filter": [], "bind": []}
        proxy = self
        session_local = threading.local()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                s = getattr(session_local, "s", None) or requests.Session()
                session_local.s = s
                start = time.perf_counter()
                r = s.post(proxy.target + self.path, data=body, timeout=60,
                           headers={"Content-Type": "application/json"})  # fmt: skip
                verb = self.path.strip("/")
                if verb in proxy.times:
                    proxy.times[verb].append(time.perf_counter() - start)
                self.send_response(r.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            def log_message(self, *_args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take(self) -> dict[str, list[float]]:
        out, self.times = self.times, {"filter": [], "bind": []}
        return out


class Profiler:
    """``/debug/pprof/profile?seconds=S`` of our extender, fetched while a round runs."""

    def __init__(self, ext: hamipeer.Extender, seconds: float, work: Path) -> None:
        self.path = work / "ours.pprof"
        url = f"{ext.metrics_url}/debug/pprof/profile?seconds={seconds:g}"

        def fetch() -> None:
            self.path.write_bytes(requests.get(url, timeout=seconds + 60).content)

        self.thread = threading.Thread(target=fetch, daemon=True)
        self.thread.start()

    def show(self) -> None:
        self.thread.join()
        top = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=20", str(self.path)],
                             capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        print(top.stdout or top.stderr, flush=True)


@dataclass
class Round:
    which: str
    pods: int
    seconds: float
    cpu: float
    rss_mib: float
    requests: int
    latencies: dict[str, list[float]] = field(default_factory=dict)


def pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100)[q - 1] if len(xs) >= 2 else (xs[0] if xs else float("nan"))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def audit_counts(path: Path, offset: int) -> tuple[Counter[str], int]:
    counts: Counter[str] = Counter()
    with path.open("rb") as fh:
        fh.seek(offset)
        data = fh.read()
    for line in data.splitlines():
        if b'"ResponseComplete"' in line or b'"Panic"' in line:
            counts[json.loads(line).get("user", {}).get("username", "")] += 1
    return counts, offset + len(data)


def kube_scheduler_config(setup: hamipeer.ChartSetup, extender_url: str) -> str:
    config: dict[str, Any] = json.loads(json.dumps(setup.scheduler_config))
    # one kube-scheduler at a time; the bench's LeaseKeeper holds the chart's lease throughout, so
    # neither extender loses leadership between rounds
    config["leaderElection"] = {"leaderElect": False}
    for ext in config["extenders"]:
        ext["urlPrefix"], ext["enableHTTPS"] = extender_url, False
        ext.pop("tlsConfig", None)
    return yaml.safe_dump(config)


def bench_pod(i: int, namespace: str) -> dict[str, Any]:
    mem = (1024, 2048, 4096, 8192)[i % 4]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"b{i:05d}", "namespace": namespace,
                     "annotations": {"hami.io/node-scheduler-policy": "spread"}},
        "spec": {"schedulerName": "hami-scheduler", "containers": [
            {"name": "main", "image": "cuda", "resources": {"limits": limits(1, mem, 10)}}]},
    }  # fmt: skip


@dataclass
class Cluster:
    cp: controlplane.ControlPlane
    setup: hamipeer.ChartSetup
    audit: Path
    offset: int = 0

    def requests_since(self) -> Counter[str]:
        counts, self.offset = audit_counts(self.audit, self.offset)
        return counts


def run_round(c: Cluster, ext: hamipeer.Extender, proxy: TimingProxy, pods: int, tag: str) -> Round:
    cp = c.cp
    s = cp.session()
    ns = f"bench-{tag}"
    s.post(cp.url + "/api/v1/namespaces", json={"metadata": {"name": ns}}, timeout=30)
    cp.start_kube_scheduler(kube_scheduler_config(c.setup, proxy.url))
    c.requests_since()
    proxy.take()
    cpu0 = cpu_seconds(ext.pid)
    start = time.monotonic()
    for i in range(pods):
        s.post(f"{cp.url}/api/v1/namespaces/{ns}/pods", json=bench_pod(i, ns), timeout=30).raise_for_status()

    def bound() -> bool:
        items = s.get(f"{cp.url}/api/v1/namespaces/{ns}/pods", timeout=30).json()["items"]
        return sum(1 for p in items if p["spec"].get("nodeName")) == pods

    wait_until(bound, 600, f"{pods} pods bound through {ext.name}", interval=0.05)
    seconds = time.monotonic() - start
    cpu = cpu_seconds(ext.pid) - cpu0
    counts = c.requests_since()
    cp.stop_kube_scheduler()
    result = Round(ext.name, pods, seconds, cpu, rss_mib(ext.pid), counts[USERS[ext.name]], proxy.take())
    s.delete(f"{cp.url}/api/v1/namespaces/{ns}/pods", json={"gracePeriodSeconds": 0}, timeout=60)
    for node in s.get(cp.url + "/api/v1/nodes", timeout=60).json()["items"]:
        if "hami.io/mutex.lock" in (node["metadata"].get("annotations") or {}):
            s.patch(f"{cp.url}/api/v1/nodes/{node['metadata']['name']}",
                    json={"metadata": {"annotations": {"hami.io/mutex.lock": None}}},
                    headers={"Content-Type": "application/merge-patch+json"}, timeout=30)  # fmt: skip
    c.requests_since()
    return result


def report(nodes: int, rounds: list[Round]) -> None:
    def agg(which: str) -> dict[str, float]:
        rs = [r for r in rounds if r.which == which]
        n = sum(r.pods for r in rs)
        lat = {v: [x for r in rs for x in r.latencies.get(v, [])] for v in ("filter", "bind")}
        return {
            "pods/s": n / sum(r.seconds for r in rs),
            "filter p50 ms": 1000 * pct(lat["filter"], 50), "filter p99 ms": 1000 * pct(lat["filter"], 99),
            "bind p50 ms": 1000 * pct(lat["bind"], 50), "bind p99 ms": 1000 * pct(lat["bind"], 99),
            "CPU ms/pod": 1000 * sum(r.cpu for r in rs) / n, "RSS MiB": max(r.rss_mib for r in rs),
            "API requests/pod": sum(r.requests for r in rs) / n,
        }  # fmt: skip

    h, o = agg("hami"), agg("ours")
    targets = {"pods/s": ">= 1", "filter p99 ms": "<= 1", "CPU ms/pod": "<= 1.5", "API requests/pod": "<= 1"}
    print(f"\n{nodes} nodes x 8 GPUs, {sum(r.pods for r in rounds) // 2} pods per extender")
    print(f"{'':18} {'HAMi':>10} {'ours':>10} {'ours/HAMi':>10}  target")
    for key in h:
        ratio = o[key] / h[key] if h[key] else float("nan")
        print(f"{key:18} {h[key]:10.2f} {o[key]:10.2f} {ratio:10.2f}  {targets.get(key, '')}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hami-src", default=None, help="HAMi checkout (default $HAMI_SRC)")
    p.add_argument("--nodes", default="500,1000")
    p.add_argument("--pods", type=int, default=200, help="pods per round")
    p.add_argument("--rounds", type=int, default=2, help="rounds per extender, alternating")
    p.add_argument("-v", type=int, default=1, help="both extenders' log verbosity")
    p.add_argument("--profile", type=float, default=0.0, metavar="S",
                   help="profile ours for S s of its last round (--profiling); print pprof's top")
    args = p.parse_args(argv)
    src = hamipeer.source(args.hami_src)
    if src is None:
        print(hamipeer.ABSENT, file=sys.stderr)
        return 2
    binary, setup = hamipeer.build(src), hamipeer.chart_setup(src)
    for nodes in (int(n) for n in args.nodes.split(",")):
        work = Path(tempfile.mkdtemp(prefix=f"bench-vs-hami-{nodes}-"))
        policy = work / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY), encoding="utf-8")
        audit = work / "audit.log"
        audit_args = [f"--audit-policy-file={policy}", f"--audit-log-path={audit}", "--audit-log-format=json",
                      "--audit-log-mode=blocking"]  # fmt: skip
        group = ProcessGroup(work / "logs")
        with controlplane.ControlPlane(work / "cp", apiserver_args=audit_args) as cp:
            s = cp.session()
            reported = format_handshake(Handshake(REPORTED, datetime.now().astimezone()))
            objs = [gpu_node(f"node-{i:04d}", i, 8, reported, "bench") for i in range(nodes)]
            apiside.seed(cp.url, objs, [], session=s)
            exts = {}
            try:
                for which in ("hami", "ours"):
                    kubeconfig = cp.kubeconfig_for(USERS[which], ["system:masters"])
                    flags = [*KUBE_CLIENT, *(["--profiling"] if which == "ours" and args.profile else [])]
                    exts[which] = hamipeer.start(which, group, kubeconfig, setup, binary=binary,
                                                 verbosity=args.v, extra_flags=flags)  # fmt: skip
                proxies = {w: TimingProxy(e.url) for w, e in exts.items()}
                with hamipeer.LeaseKeeper(cp.url, session=s):
                    for which, ext in exts.items():
                        side = apiside.Side(which, cp.url, ext.url, ext.metrics_url, s)
                        apiside.wait_ready(side, nodes * 8, timeout=300)
                    rounds: list[Round] = []
                    cluster = Cluster(cp, setup, audit)
                    for r in range(args.rounds):
                        for which in ("hami", "ours"):
                            tag = f"{nodes}-{r}-{which}"
                            last = which == "ours" and r == args.rounds - 1 and args.profile > 0
                            profiler = Profiler(exts[which], args.profile, work) if last else None
                            got = run_round(cluster, exts[which], proxies[which], args.pods, tag)
                            if profiler is not None:
                                profiler.show()
                            print(f"round {r} {which}: {got.pods / got.seconds:.1f} pods/s", flush=True)
                            rounds.append(got)
                report(nodes, rounds)
            finally:
                group.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
