"""In-process variant of ``bench_extender.py`` (``--in-process``): emulator, extender and load clients
share one Python process and one GIL, so pods/s here is bounded by their CPU together.

Run: PYTHONPATH=src python bench/bench_extender.py --in-process [--nodes 1000] [--pods 400]

The cluster is ``--nodes`` nodes × 8 GPUs (T4, split 10). Each client takes pods from a queue and
does what kube-scheduler does: filter over every node name, then bind to the chosen node. A
simulated device plugin drops the node lock right after a successful bind (as Allocate would);
a bind that meets a held lock is retried with a new filter, as kube-scheduler retries. Figures:
pods/s (wall clock from the first filter to the last bind), filter and bind latency percentiles,
API requests per pod, CPU per pod (the whole process, and the extender's threads alone, also by kind
of thread: HTTP loop, HTTP workers, each informer, the event recorder, the register loop; everything
shares one GIL, so pods/s is bounded by 1 / process CPU per pod), and API calls per idle register
tick (from the emulator's request log).
"""

from __future__ import annotations

import argparse
import queue
import statistics
import sys
import threading
import time
from typing import Any

import requests

from hami.core.kube.options import KubeOptions
from hami.scheduler.engine.decision import FilterConfig
from hami.scheduler.extender.daemon import Extender, Options
from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until

# Threads of the extender (HTTP workers, informers, register loop, event recorder); the rest of
# the process is the emulator and the simulated kube-scheduler clients.
EXTENDER_THREADS = ("informer-", "register", "events-", "hami-scheduler")


def thread_cpu() -> dict[int, tuple[str, float]]:
    """CPU seconds used so far by each live thread, with its name."""
    out: dict[int, tuple[str, float]] = {}
    for t in threading.enumerate():
        if t.ident is None:
            continue
        try:
            out[t.ident] = (t.name, time.clock_gettime(time.pthread_getcpuclockid(t.ident)))
        except OSError:
            continue  # exited meanwhile
    return out


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--node-policy", default="spread")
    parser.add_argument("--kube-qps", type=float, default=-1.0, help="-1: no client-side limit")
    parser.add_argument("--kube-burst", type=int, default=100)
    args = parser.parse_args(argv)

    with KubeAPIServer() as api:
        names = [f"node-{i:04d}" for i in range(args.nodes)]
        for name in names:
            api.store.put(gpu_node(name, gpus=8, mem=15360))
        pods = [api.store.put(gpu_pod(f"p{i}", mem=2048, cores=10)) for i in range(args.pods)]
        opts = Options(
            http_bind="127.0.0.1:0",
            metrics_bind="127.0.0.1:0",
            kube=KubeOptions(qps=args.kube_qps, burst=args.kube_burst, host=api.url, timeout=30),
            filter=FilterConfig(node_policy=args.node_policy),
            register_tick=3600,
            http_threads=32,
        )
        ext = Extender(opts)
        started = time.monotonic()
        ext.start()
        wait_until(ext.state.synced.is_set, timeout=300, what="sync")
        wait_until(lambda: len(ext.state.pod_informer.list()) >= args.pods, timeout=60, what="pods")
        print(
            f"cluster: {args.nodes} nodes x 8 GPUs, {args.pods} pods; "
            f"synced in {time.monotonic() - started:.1f}s"
        )

        # Idle register tick: every handshake already written and seen by the cache.
        wait_until(
            lambda: all(
                (ext.state.get_node(n) or {})
                .get("metadata", {})
                .get("annotations", {})
                .get("hami.io/node-handshake")
                for n in names
            ),
            timeout=120,
            what="handshakes",
        )
        ext.register.run_once()
        api.requests.clear()
        ticks = 5
        t0 = time.monotonic()
        for _ in range(ticks):
            ext.register.run_once()
        tick_s = (time.monotonic() - t0) / ticks
        print(
            f"idle register tick: {len(api.requests.records) / ticks:.1f} API calls/tick, "
            f"{tick_s * 1000:.1f} ms/tick"
        )

        assert ext.http is not None
        base = ext.http.url
        work: queue.Queue[dict[str, Any]] = queue.Queue()
        for p in pods:
            work.put(p)
        filter_s: list[float] = []
        bind_s: list[float] = []
        retries = [0]
        lock = threading.Lock()

        def client() -> None:
            session = requests.Session()
            while True:
                try:
                    pod = work.get_nowait()
                except queue.Empty:
                    return
                meta = pod["metadata"]
                while True:
                    t = time.monotonic()
                    reply = session.post(
                        f"{base}/filter", json={"Pod": pod, "NodeNames": names}, timeout=60
                    ).json()
                    t2 = time.monotonic()
                    node = reply["NodeNames"][0]
                    error = session.post(
                        f"{base}/bind",
                        json={
                            "PodName": meta["name"],
                            "PodNamespace": meta["namespace"],
                            "PodUID": meta["uid"],
                            "Node": node,
                        },
                        timeout=60,
                    ).json()["Error"]
                    t3 = time.monotonic()
                    with lock:
                        filter_s.append(t2 - t)
                        bind_s.append(t3 - t2)
                    if not error:
                        stored = api.store.get("nodes", node)
                        if stored is not None and stored["metadata"]["annotations"].pop(
                            "hami.io/mutex.lock", None
                        ):
                            api.store.put(stored)
                        break
                    with lock:
                        retries[0] += 1

        api.requests.clear()
        threads = [threading.Thread(target=client, name="bench-client") for _ in range(args.clients)]
        cpu0, process0 = thread_cpu(), time.process_time()
        t0 = time.monotonic()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.monotonic() - t0
        process_cpu = time.process_time() - process0
        # by kind of thread: the HTTP event loop, its workers, each informer, the event recorder
        by_kind: dict[str, float] = {}
        for ident, (name, cpu) in thread_cpu().items():
            if name.startswith(EXTENDER_THREADS):
                kind = name.rstrip("0123456789").rstrip("-") if name[-1:].isdigit() else name
                by_kind[kind] = by_kind.get(kind, 0.0) + cpu - cpu0.get(ident, (name, 0.0))[1]
        extender_cpu = sum(by_kind.values())
        calls = len(api.requests.records)
        ext.stop()
        print(
            f"end-to-end: {args.pods / wall:.0f} pods/s ({args.pods} pods in {wall:.2f}s, "
            f"{args.clients} clients, "
            f"node policy {args.node_policy}, kube-qps {args.kube_qps:g}), {retries[0]} lock retries"
        )
        print(
            f"filter latency ms: p50 {pct(filter_s, 0.5):.1f} p99 {pct(filter_s, 0.99):.1f}; "
            f"bind latency ms: p50 {pct(bind_s, 0.5):.1f} p99 {pct(bind_s, 0.99):.1f}; "
            f"mean filter {statistics.fmean(filter_s) * 1000:.1f}"
        )
        print(f"API requests: {calls / args.pods:.1f} per pod (incl. events)")
        ranked = sorted(by_kind.items(), key=lambda kv: -kv[1])
        print("extender CPU ms per pod by thread: "
              + ", ".join(f"{kind} {cpu / args.pods * 1000:.2f}" for kind, cpu in ranked))
        print(
            f"CPU per pod: {process_cpu / args.pods * 1000:.1f} ms in the process "
            f"(one GIL: emulator, clients and extender), {extender_cpu / args.pods * 1000:.1f} ms "
            f"in the extender's threads"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
