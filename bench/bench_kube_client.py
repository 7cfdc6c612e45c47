"""The Kubernetes client layer against the API emulator (real HTTP on localhost).

Run: PYTHONPATH=src python bench/bench_kube_client.py [--requests N] [--pods N]

Prints:
- per-request latency of a typed GET through the plain ApiClient and through ``new_api_client``
  (limiter off): the cost of the limiter + metrics layer;
- a throttled run at the tuning guide's ``--kube-qps=50 --kube-burst=100``: achieved rate and the
  rate-limiter wait recorded in ``rest_client_rate_limiter_duration_seconds``;
- informer: time to sync N pods, and the delay from a write on the server to the handler call;
- writes: the client thread's CPU per merge PATCH through ``raw`` (the lean transport) beside the
  same PATCH through the generated client, and per Event POST carrying a 1,000-node
  FilteringSucceed message (about 15 KB, echoed back), as the extender's binds and recorder send.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from prometheus_client import CollectorRegistry

from hami.core.kube import raw
from hami.core.kube.client import new_api_client
from hami.core.kube.informer import Informer
from hami.core.kube.options import KubeOptions
from hami.testing.builders import pod
from hami.testing.kubeapi import SERVING, KubeAPIServer
from hami.testing.processes import ProcessGroup


def _latencies(v1: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        v1.read_namespaced_pod("p0", "default")
        out.append(time.perf_counter() - start)
    return out


def bench_overhead(server: KubeAPIServer, n: int) -> None:
    cfg = k8s.Configuration()
    cfg.host = server.url
    cfg.retries = False
    plain = k8s.ApiClient(cfg)
    limited = new_api_client(KubeOptions(host=server.url, qps=-1), registry=CollectorRegistry())
    for name, api in (("plain ApiClient", plain), ("new_api_client", limited)):
        v1 = k8s.CoreV1Api(api)
        _latencies(v1, 20)  # warm the connection
        lat = sorted(_latencies(v1, n))
        print(f"{name:>16}: GET median {statistics.median(lat) * 1e3:.3f} ms, "
              f"p95 {lat[int(len(lat) * 0.95)] * 1e3:.3f} ms over {n}")
        api.close()


def bench_throttled(server: KubeAPIServer, n: int) -> None:
    registry = CollectorRegistry()
    api = new_api_client(KubeOptions(host=server.url, qps=50, burst=100), registry=registry)
    v1 = k8s.CoreV1Api(api)
    start = time.perf_counter()
    for _ in range(n):
        v1.read_namespaced_pod("p0", "default")
    elapsed = time.perf_counter() - start
    labels = {"verb": "GET", "host": server.url.removeprefix("http://")}
    waited = registry.get_sample_value("rest_client_rate_limiter_duration_seconds_sum", labels) or 0.0
    fast = registry.get_sample_value(
        "rest_client_rate_limiter_duration_seconds_bucket", {**labels, "le": "0.005"}) or 0.0
    print(f"qps=50 burst=100: {n} GETs in {elapsed:.2f} s ({n / elapsed:.1f}/s; bucket model "
          f"{max(0, n - 100) / 50:.2f} s), limiter wait total {waited:.2f} s, "
          f"{int(fast)} requests waited <= 5 ms")
    api.close()


def bench_informer(server: KubeAPIServer, pods: int, updates: int) -> None:
    for i in range(pods):
        server.store.put(pod(name=f"bulk-{i}"))
    api = new_api_client(KubeOptions(host=server.url, qps=-1), registry=CollectorRegistry())
    informer = Informer(api, ("", "v1", "pods"))
    arrived: dict[str, float] = {}
    cond = threading.Condition()

    def on_update(old: dict[str, Any], new: dict[str, Any]) -> None:
        with cond:
            arrived[new["metadata"]["resourceVersion"]] = time.perf_counter()
            cond.notify_all()

    informer.add_handler(on_update=on_update)
    start = time.perf_counter()
    informer.start()
    informer.wait_for_sync(120)
    print(f"informer: synced {len(informer.list())} pods in {time.perf_counter() - start:.2f} s")
    delays = []
    for i in range(updates):
        sent = time.perf_counter()
        rv = server.store.put({**pod(name="bulk-0"), "spec": {"n": i}})["metadata"]["resourceVersion"]
        with cond:
            cond.wait_for(lambda rv=rv: rv in arrived, 10)
            delays.append(arrived[rv] - sent)
    delays.sort()
    print(f"informer: write-to-handler median {statistics.median(delays) * 1e3:.2f} ms, "
          f"p95 {delays[int(len(delays) * 0.95)] * 1e3:.2f} ms over {updates} updates")
    informer.stop()
    api.close()


def _cpu_per_call(call: Any, n: int, batches: int = 5) -> float:
    """Median over ``batches`` of this thread's CPU per ``call(i)``, in microseconds."""
    for i in range(20):
        call(i)
    per_batch = []
    for _ in range(batches):
        start = time.thread_time()
        for i in range(n):
            call(i)
        per_batch.append((time.thread_time() - start) / n * 1e6)
    return statistics.median(per_batch)


def bench_writes(n: int) -> None:
    """Against the emulator in its own process: in this one, its threads would share the GIL and
    the caches with the client and make the client's thread CPU swing by half."""
    with tempfile.TemporaryDirectory(prefix="bench-kube-client-") as tmp:
        children = ProcessGroup(Path(tmp))
        try:
            emulator = children.python("kubeapi", "hami.testing.kubeapi", ["--port=0"])
            url = children.wait_for_log(emulator, SERVING, 120, "the API emulator").group(1)
            api = new_api_client(KubeOptions(host=url, qps=-1), registry=CollectorRegistry())
            raw.call(api, "POST", "/api/v1/nodes", body={"metadata": {"name": "n0"}})
            v1 = k8s.CoreV1Api(api)
            lean = _cpu_per_call(lambda i: raw.call(
                api, "PATCH", "/api/v1/nodes/n0", body={"metadata": {"annotations": {"a": str(i)}}},
                content_type=raw.MERGE_PATCH), n)
            generated = _cpu_per_call(
                lambda i: v1.patch_node("n0", {"metadata": {"annotations": {"a": str(i)}}}), n)
            labels = ",".join(f"node-{i:04d}:{i / 7:.2f}" for i in range(1000))
            message = f"find fit node(node-0001), 0 nodes not fit, 1000 nodes fit({labels})"
            event = _cpu_per_call(lambda i: raw.call(api, "POST", "/api/v1/namespaces/default/events", body={
                "metadata": {"name": f"p{i}.{time.time_ns():x}", "namespace": "default"},
                "involvedObject": {"kind": "Pod", "name": f"p{i}", "namespace": "default"},
                "reason": "FilteringSucceed", "message": message, "type": "Normal"}), n)
            api.close()
        finally:
            children.stop()
    print(f"writes: client thread CPU per merge PATCH {lean:.0f} us through raw, {generated:.0f} us "
          f"through the generated client ({lean / generated:.2f}x); per Event POST with a 1,000-node "
          f"message {event:.0f} us (medians of 5 x {n}, emulator in its own process)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    args = parser.parse_args()
    with KubeAPIServer() as server:
        server.store.put(pod(name="p0"))
        bench_overhead(server, args.requests)
        bench_throttled(server, 300)
        bench_informer(server, args.pods, 200)
    bench_writes(args.requests)


if __name__ == "__main__":
    main()
