"""Allocate latency with 100 pending pods on the node (issue 7 target: p99 <= 50 ms).

The plugin runs on FakeNvml against the Kubernetes API emulator over real HTTP; a kubelet-side gRPC
client calls Allocate over the unix socket. Before each call the "scheduler" locks the node for the
next pod (the normal path); a second pass leaves the node unlocked so the pod is found by scanning
the informer cache of 100 pending pods. After each call a new pending pod replaces the one served.

Usage: PYTHONPATH=src:. python bench/bench_allocate.py [--calls 300] [--pending 100]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import grpc
from kubernetes import client
from prometheus_client import CollectorRegistry
from tests.deviceplugin.kubelet import FakeKubelet
from tests.deviceplugin.kubelet_api import deviceplugin_pb2_grpc as pb_grpc

from hami.core import annotations as ann
from hami.core.hamicore import HostLayout
from hami.core.kube.informer import Informer
from hami.core.nvml.fake import FakeNvml
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.health import XidPolicy
from hami.deviceplugin.kubeops import NodeOps
from hami.deviceplugin.manager import Manager
from hami.deviceplugin.metrics import PluginMetrics
from hami.deviceplugin.plugin import Settings
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.kubeapi.server import _Handler

NODE = "bench-node"
UUIDS = [f"GPU-{i:08x}-5c87-89ac-b1a6-7b53aa24b0ec" for i in range(8)]


def pod_body(n: int) -> dict[str, object]:
    uuid = UUIDS[n % len(UUIDS)]
    return {
        "metadata": {
            "name": f"p{n}",
            "annotations": {
                ann.POD_VGPU_NODE: NODE,
                ann.POD_BIND_TIME: str(1_700_000_000 + n),
                ann.POD_BIND_PHASE: ann.BIND_PHASE_ALLOCATING,
                ann.POD_DEVICES_TO_ALLOCATE: f"{uuid},NVIDIA,1000,10:;",
                ann.POD_DEVICES_ALLOCATED: f"{uuid},NVIDIA,1000,10:;",
            },
        },
        "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "cuda"}]},
    }


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(calls: int, pending: int, nagle: bool) -> None:
    # With Nagle on, every response on a kept-alive connection stalls ~40 ms on the client's delayed
    # ACK, which a real API server does not do; the emulator turns it off, --emulator-nagle shows
    # what the stall costs (three API round trips per Allocate).
    _Handler.disable_nagle_algorithm = not nagle
    work = Path(tempfile.mkdtemp(prefix="dpb", dir="/tmp"))
    api = KubeAPIServer().start()
    config = client.Configuration()
    config.host = api.url
    kube = client.ApiClient(config)
    core = client.CoreV1Api(kube)
    core.create_node({"metadata": {"name": NODE}})
    for n in range(pending):
        core.create_namespaced_pod("default", pod_body(n))
    nvml = FakeNvml(
        {"devices": [{"uuid": u, "name": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920} for u in UUIDS]}
    )
    kubelet = FakeKubelet(work)
    kubelet.start()
    registry = CollectorRegistry()
    pods = Informer(kube, ("", "v1", "pods"), field_selector=f"spec.nodeName={NODE}", registry=registry)
    pods.start()
    pods.wait_for_sync(30)
    settings = Settings(
        node=NODE,
        socket_dir=work,
        kubelet_socket=work / "kubelet.sock",
        layout=HostLayout(str(work / "hook"), str(work / "lock")),
        mig_apply_lock=work / "mig.lock",
    )
    manager = Manager(
        settings,
        PluginConfig(device_split_count=10),
        nvml=nvml,
        ops=NodeOps(kube),
        pods=pods,
        metrics=PluginMetrics(registry, NODE),
        policy=XidPolicy(),
    )
    manager.start()
    manager.started.wait(30)
    channel = grpc.insecure_channel(f"unix://{work / 'nvidia-gpu.sock'}")
    stub = pb_grpc.DevicePluginStub(channel)
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
                # Wait until the informer saw both the new pod and the served one's bind phase.
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    got = pods.get(f"default/p{pod}")
                    if (
                        pods.get(f"default/p{next_pod - 1}")
                        and got
                        and got["metadata"]["annotations"].get(ann.POD_BIND_PHASE) == ann.BIND_PHASE_SUCCESS
                    ):
                        break
                    time.sleep(0.001)
            ms = [s * 1000 for s in samples]
            print(
                f"Allocate, {pending} pending pods, {'node locked' if locked else 'no lock (cache scan)'}: "
                f"n={len(ms)} p50={statistics.median(ms):.2f} ms p90={percentile(ms, 0.90):.2f} ms "
                f"p99={percentile(ms, 0.99):.2f} ms max={max(ms):.2f} ms (target p99 <= 50 ms)"
                + (" [emulator Nagle on]" if nagle else "")
            )
    finally:
        channel.close()
        manager.stop()
        kubelet.stop()
        pods.stop()
        nvml.close()
        kube.close()
        api.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--pending", type=int, default=100)
    parser.add_argument("--emulator-nagle", action="store_true", help="keep Nagle on in the API emulator")
    args = parser.parse_args()
    run(args.calls, args.pending, args.emulator_nagle)


if __name__ == "__main__":
    main()
