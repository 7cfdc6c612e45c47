"""Allocate latency with 100 pending pods on the node (issue 7 target: p99 <= 50 ms).

The plugin runs on FakeNvml against the Kubernetes API emulator over real HTTP; a kubelet-side gRPC
client calls Allocate over the unix socket. Before each call the "scheduler" locks the node for the
next pod (the normal path); a second pass leaves the node unlocked so the pod is found by scanning
the informer cache of 100 pending pods. After each call a new pending pod replaces the one served.

Usage: PYTHONPATH=src python bench/bench_allocate.py [--calls 300] [--pending 100]
       [--tracing-rounds N [--tracing-ratios 1.0,0.1]]

``--tracing-rounds N`` measures what tracing costs Allocate (docs/design/tracing.md) on one plugin:
N rounds of ``--calls`` node-locked Allocates for each of: tracing compiled out (the
``hami.core.tracing`` entry points Allocate calls replaced by no-op stubs), off, and on with each
of ``--tracing-ratios`` sampled (spans exported over OTLP/HTTP to a sink in this process; every pod
carrying the context the bind bound to its UID), the order rotating every round. It prints this
process's CPU per Allocate for each (the plugin, the API emulator it calls and the kubelet-side
client all run here; only the calls themselves are counted), the difference off minus compiled out
beside the rounds' own spread, and the ratios of tracing on to off.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client
from prometheus_client import CollectorRegistry, Counter

from hami.core import annotations as ann
from hami.core import tracing
from hami.core.kube.informer import Informer
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.deviceplugin.config import PluginConfig
from hami.testing import tracecost
from hami.testing.builders import allocating_pod
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.otlpsink import OtlpSink
from hami.testing.pluginrig import start_rig
from hami.testing.wait import wait_until

NODE = "bench-node"
KEY = "bench-trace-key"
UUIDS = [f"GPU-{i:08x}-5c87-89ac-b1a6-7b53aa24b0ec" for i in range(8)]


def pod_body(n: int) -> dict[str, object]:
    uuid = UUIDS[n % len(UUIDS)]
    main = {"name": "main", "image": "cuda"}
    return allocating_pod(f"p{n}", NODE, f"{uuid},NVIDIA,1000,10:;", main, bind_time=1_700_000_000 + n)


def seen(pods: Informer, served: int, new: int) -> bool:
    """The informer has the new pod and the served one's bind phase ``success``."""
    got = pods.get(f"default/p{served}")
    return bool(
        pods.get(f"default/p{new}")
        and got
        and got["metadata"]["annotations"].get(ann.POD_BIND_PHASE) == ann.BIND_PHASE_SUCCESS
    )


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(calls: int, pending: int, nagle: bool) -> None:
    # With Nagle on, every response on a kept-alive connection stalls ~40 ms on the client's delayed
    # ACK, which a real API server does not do; the emulator turns it off, --emulator-nagle shows
    # what the stall costs (three API round trips per Allocate).
    work = Path(tempfile.mkdtemp(prefix="dpb", dir="/tmp"))
    api = KubeAPIServer(nagle=nagle).start()
    config = client.Configuration()
    config.host = api.url
    kube = client.ApiClient(config)
    core = client.CoreV1Api(kube)
    for n in range(pending):
        core.create_namespaced_pod("default", pod_body(n))
    spec = {"devices": [{"uuid": u, "name": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920} for u in UUIDS]}
    # the daemon's own register and health intervals: the steady state, not a test's quick loops
    rig = start_rig(api, kube, work, PluginConfig(device_split_count=10), spec, node=NODE, fast=False)
    channel, stub = rig.kubelet.plugin("nvidia-gpu.sock")
    pods = rig.pods
    next_pod = pending
    served = 0
    try:
        for locked in (True, False):
            samples: list[float] = []
            for _ in range(calls):
                pod = served  # the earliest-bound pod still pending
                if locked:
                    core.patch_node(
                        NODE,
                        {
                            "metadata": {
                                "annotations": {ann.NODE_LOCK: f"2026-01-01T00:00:00Z,default,p{pod}"}
                            }
                        },
                    )
                uuid = UUIDS[pod % len(UUIDS)]
                req = pb.AllocateRequest(
                    container_requests=[pb.ContainerAllocateRequest(devices_ids=[f"{uuid}-0"])]
                )
                start = time.perf_counter()
                stub.Allocate(req)
                samples.append(time.perf_counter() - start)
                served += 1
                core.create_namespaced_pod("default", pod_body(next_pod))
                next_pod += 1
                wait_until(
                    lambda pod=pod, new=next_pod - 1: seen(pods, pod, new),
                    10,
                    "the informer to see the new pod and the served one's bind phase",
                    interval=0.001,
                )
            ms = [s * 1000 for s in samples]
            print(
                f"Allocate, {pending} pending pods, {'node locked' if locked else 'no lock (cache scan)'}: "
                f"n={len(ms)} p50={statistics.median(ms):.2f} ms p90={percentile(ms, 0.90):.2f} ms "
                f"p99={percentile(ms, 0.99):.2f} ms max={max(ms):.2f} ms (target p99 <= 50 ms)"
                + (" [emulator Nagle on]" if nagle else "")
            )
    finally:
        channel.close()
        rig.stop()
        kube.close()
        api.stop()
        shutil.rmtree(work, ignore_errors=True)


@contextmanager
def compiled_out() -> Iterator[None]:
    """The tracing entry points Allocate calls replaced by stubs that do nothing (with the real
    signatures: a call costs what calling an empty function costs); restored afterwards."""

    def now_ns() -> int:
        return 0

    def pod_span(name: str, pod: Any, start_ns: int = 0, attributes: Any = None, *,
                 bound_only: bool = False, admit: Any = None) -> None:
        return None

    def end(span: Any, error: str = "", attributes: Any = None) -> None:
        return None

    def exemplar(span: Any) -> None:
        return None

    stubs: list[Callable[..., Any]] = [now_ns, pod_span, end, exemplar]
    real = {f.__name__: getattr(tracing, f.__name__) for f in stubs}
    for stub in stubs:
        setattr(tracing, stub.__name__, stub)
    try:
        yield
    finally:
        for name, f in real.items():
            setattr(tracing, name, f)


@contextmanager
def variant(sink: OtlpSink, rejected: Counter, ratio: float | None, stubbed: bool) -> Iterator[None]:
    """Tracing on at ``ratio`` (spans into ``sink``), off (None), or compiled out (``stubbed``)."""
    if stubbed:
        with compiled_out():
            yield
        return
    if ratio is None:
        yield
        return
    os.environ.update({
        "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": str(ratio),
    })
    tracing.setup("hami-device-plugin", rejected, key=KEY)
    try:
        yield
    finally:
        tracing.shutdown()  # flushes the batch: its export is part of the price


def traced_pod(n: int, ratio: float) -> dict[str, Any]:
    """``pod_body(n)`` with its UID and the context the bind bound to it, sampled at ``ratio``."""
    body: dict[str, Any] = pod_body(n)
    uid = str(uuid.uuid4())
    sampled = secrets.randbelow(1 << 30) < ratio * (1 << 30)
    traceparent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-{'01' if sampled else '00'}"
    body["metadata"]["uid"] = uid
    context = tracing.bound(KEY.encode(), "default", uid, traceparent)
    body["metadata"]["annotations"][tracing.ANNOTATION] = context
    return body


def tracing_rounds(rounds: int, calls: int, pending: int, ratios: list[float]) -> None:
    work = Path(tempfile.mkdtemp(prefix="dpb", dir="/tmp"))
    api = KubeAPIServer().start()
    config = client.Configuration()
    config.host = api.url
    kube = client.ApiClient(config)
    core = client.CoreV1Api(kube)
    for n in range(pending):
        api.store.put(traced_pod(n, 1.0))  # put as given: the pod keeps the UID its context is bound to
    spec = {"devices": [{"uuid": u, "name": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920} for u in UUIDS]}
    rig = start_rig(api, kube, work, PluginConfig(device_split_count=10), spec, node=NODE, fast=False)
    channel, stub = rig.kubelet.plugin("nvidia-gpu.sock")
    variants = tracecost.variants(ratios)
    cpu: dict[str, list[float]] = {name: [] for name, _ in variants}
    rejected = tracing.tracing_metrics(CollectorRegistry())
    served = [0]

    def batch(ratio: float | None) -> float:
        """CPU ms per Allocate over ``calls`` node-locked calls, each for the next pending pod."""
        spent = 0.0
        for _ in range(calls):
            pod = served[0]
            lock = f"2026-01-01T00:00:00Z,default,p{pod}"
            core.patch_node(NODE, {"metadata": {"annotations": {ann.NODE_LOCK: lock}}})
            uuid_ = UUIDS[pod % len(UUIDS)]
            container = pb.ContainerAllocateRequest(devices_ids=[f"{uuid_}-0"])
            req = pb.AllocateRequest(container_requests=[container])
            start = time.process_time()
            stub.Allocate(req)
            spent += time.process_time() - start
            served[0] += 1
            new = pending + pod
            api.store.put(traced_pod(new, 1.0 if ratio is None else ratio))
            wait_until(lambda pod=pod, new=new: seen(rig.pods, pod, new), 10,
                       "the informer to see the new pod and the served one's bind phase", interval=0.001)
        return spent / calls * 1000

    try:
        with OtlpSink() as sink:
            batch(None)  # a warm-up, not counted: the first calls pay for caches and imports
            for i in range(rounds):
                for name, ratio in tracecost.rotated(variants, i):
                    print(f"--- round {i + 1}: tracing {name}")
                    with variant(sink, rejected, ratio, name == "compiled out"):
                        cpu[name].append(batch(ratio))
            refused = sum(s.value for m in rejected.collect() for s in m.samples if s.name.endswith("_total"))
            print(f"OTLP export: {sink.requests} requests, {sink.received} bytes; "
                  f"contexts rejected: {refused:.0f}")
    finally:
        channel.close()
        rig.stop()
        kube.close()
        api.stop()
        shutil.rmtree(work, ignore_errors=True)

    print("\n".join(tracecost.summary("CPU per Allocate", "Allocate", cpu, variants)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--pending", type=int, default=100)
    parser.add_argument("--emulator-nagle", action="store_true", help="keep Nagle on in the API emulator")
    parser.add_argument("--tracing-rounds", type=int, default=0,
                        help="rounds of: tracing compiled out, off, on at each --tracing-ratios; prints CPU")
    parser.add_argument("--tracing-ratios", default="1.0,0.1",
                        help="with --tracing-rounds, the shares of pods sampled")
    args = parser.parse_args()
    if args.tracing_rounds:
        ratios = [float(r) for r in args.tracing_ratios.split(",")]
        tracing_rounds(args.tracing_rounds, args.calls, args.pending, ratios)
        return
    run(args.calls, args.pending, args.emulator_nagle)


if __name__ == "__main__":
    main()
