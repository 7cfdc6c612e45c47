"""The demo's GPU node: the simulated node (``hami.testing.simnode``) driven by the cluster's pods, with
the real vGPU monitor serving it, and the scenarios the alerts are proven with.

- GPUs: a FakeNvml with ``hami.testing.cluster``'s UUIDs (the ones the node's register annotation and
  the device plugin's fake NVML use).
- Containers: one HAMi-core region per container of every pod the API server binds to this node with
  ``hami.io/vgpu-devices-allocated``; pods that come and go in the API come and go here.
- Scenarios: the ``scenarios/overlimit`` container uses 1.5 times its vGPU memory limit; the
  ``notebooks/jupyter-idle`` container's last kernel ran two hours ago;
  ``--xid-every`` injects a critical XID (79, fallen off the bus) into the last GPU.

``python -m hami.testing.simhost --kubeconfig FILE --hook-path DIR --bind :9394``
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from hami.core import annotations as ann
from hami.core import klog
from hami.core.codec.errors import CodecError
from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.kube.client import new_api_client
from hami.core.kube.informer import Informer
from hami.core.kube.options import KubeOptions
from hami.core.nvml.fake import FakeNvml
from hami.exporter.config import load_config
from hami.exporter.main import Monitor
from hami.testing import cluster
from hami.testing.regions import MEM_DATA
from hami.testing.simnode import MIB, SimContainer, SimNode

log = klog.get_logger("hami.testing.simhost")
XID_FALLEN_OFF_BUS = cluster.XID_FALLEN_OFF_BUS
OVERLIMIT_FACTOR = 1.5
IDLE_FOR_S = 7200


def containers_of(pod: Mapping[str, Any], uuids: list[str]) -> list[SimContainer]:
    """The simulated containers of one pod: one per container that holds a device of this node."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    value = (meta.get("annotations") or {}).get(ann.POD_DEVICES_ALLOCATED)
    if not value:
        return []
    try:
        per_container = decode_pod_devices(value)
    except CodecError as err:
        log.warning(
            "pod %s/%s: bad %s: %s", meta.get("namespace"), meta.get("name"), ann.POD_DEVICES_ALLOCATED, err
        )
        return []
    names = [c.get("name", "") for c in spec.get("containers") or []]
    out = []
    for name, devs in zip(names, per_container, strict=False):
        held = [d for d in devs if d.uuid in uuids]
        if held:
            d = held[0]  # the simulated region tracks one device per container
            out.append(
                SimContainer(meta["uid"], meta["name"], name, uuids.index(d.uuid), d.usedmem, d.usedcores, 0)
            )
    return out


class PodDrivenNode(SimNode):
    """A SimNode whose containers follow ``pods()`` at every step, with an over-limit scenario."""

    def __init__(self, hook_path: str, gpus: int, pods: Callable[[], list[dict[str, Any]]]) -> None:
        super().__init__(hook_path, gpus, containers=0)
        self.uuids = [cluster.gpu_uuid(0, i) for i in range(gpus)]
        self.nvml = FakeNvml(cluster.fake_nvml_spec(gpus))
        self._pods = pods
        self.overlimit: set[str] = set()  # pod uids of the over-limit scenario
        self.idle: set[str] = set()  # pod uids of the idle-vGPU scenario

    def _sync(self) -> None:
        wanted: dict[tuple[str, str], SimContainer] = {}
        for pod in self._pods():
            for c in containers_of(pod, self.uuids):
                wanted[(c.pod_uid, c.name)] = c
                if pod["metadata"]["name"] == cluster.OVERLIMIT.name:
                    self.overlimit.add(c.pod_uid)
                if pod["metadata"]["name"] == cluster.IDLE.name:
                    self.idle.add(c.pod_uid)
        with self._lock:
            kept = []
            for c in self.containers:
                if (c.pod_uid, c.name) in wanted:
                    kept.append(c)
                    del wanted[(c.pod_uid, c.name)]
                elif c.writer is not None:
                    c.writer.close()
            self.containers = kept + list(wanted.values())

    def step(self) -> None:
        self._sync()
        super().step()
        with self._lock:
            for c in self.containers:
                if c.pod_uid in self.idle and c.writer is not None:
                    c.writer.set_field("last_kernel_time", int(self._clock()) - IDLE_FOR_S)
                if c.pod_uid in self.overlimit and c.writer is not None and c.slots:
                    pid = next(iter(c.slots))
                    extra = int(c.mem_limit_mib * MIB * OVERLIMIT_FACTOR) - sum(c.used.values())
                    if extra > 0:
                        c.writer.change_memory(c.slots[pid], 0, MEM_DATA, extra)
                        c.used[pid] += extra


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hami.testing.simhost", description=__doc__)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--hook-path", required=True)
    p.add_argument("--bind", default=":9394")
    p.add_argument("--gpus", type=int, default=4)
    p.add_argument("--interval", type=float, default=1.0, help="seconds between simulation steps")
    p.add_argument("--xid-every", type=float, default=0.0, help="inject XID 79 every N seconds (0: never)")
    args = p.parse_args(argv)
    klog.setup(0)
    cfg = load_config(
        [
            "--metrics-bind-address",
            args.bind,
            "--pod-labels-allowlist",
            "app",
            "--kubeconfig",
            args.kubeconfig,
        ],
        {"HOOK_PATH": args.hook_path, "NODE_NAME": cluster.NODE},
    )
    api = new_api_client(KubeOptions(kubeconfig=args.kubeconfig, user_agent="hami-simhost"))
    informer = Informer(api, field_selector=f"spec.nodeName={cluster.NODE}")
    informer.start()
    if not informer.wait_for_sync(60):
        print("simhost: the pod informer did not sync in 60s", file=sys.stderr)
        informer.stop()
        return 1
    node = PodDrivenNode(args.hook_path, args.gpus, informer.list)
    node.start(args.interval)

    def uids() -> set[str] | None:
        return (
            {str(pod["metadata"].get("uid", "")) for pod in informer.list()}
            if informer.has_synced()
            else None
        )

    monitor = Monitor(cfg, node.nvml, informer.list, uids, ready=informer.has_synced)
    monitor.start()
    print(
        f"simhost: {cluster.NODE}, {args.gpus} GPUs, monitor on {monitor.server and monitor.server.url}",
        flush=True,
    )
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    _loop(done, node, args.xid_every)
    monitor.stop()
    node.stop()
    informer.stop()
    api.close()
    return 0


def _loop(done: threading.Event, node: PodDrivenNode, xid_every: float) -> None:
    """Injects an XID every ``xid_every`` seconds until ``done`` (0: only waits)."""
    while not done.wait(xid_every if xid_every > 0 else 3600.0):
        if xid_every > 0:
            node.nvml.inject_xid(len(node.uuids) - 1, XID_FALLEN_OFF_BUS)


if __name__ == "__main__":
    sys.exit(main())
