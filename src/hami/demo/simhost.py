"""A GPU node of the demo (sim-node, or ``--node driver-node``): the simulated node
(``hami.testing.simnode``) driven by the cluster's pods, with the real vGPU monitor serving it, and the
scenarios the alerts are proven with.

- GPUs: a FakeNvml with ``hami.testing.cluster``'s UUIDs (the ones the node's register annotation and
  the device plugin's fake NVML use).
- Containers: one HAMi-core region per container of every running pod the API server binds to this
  node with ``hami.io/vgpu-devices-allocated``; pods that come and go in the API come and go here. With
  ``--runtime-dir`` (the kubelet stand-in's), a container whose Allocate gave it
  ``NVIDIA_GPU_MEMORY_LIMIT`` (a device plugin in driver mode) gets a region without a memory limit,
  as HAMi-core then runs, and the driver's limit (``hami.demo.simdriver``). A container
  that sets ``CUDA_DISABLE_CONTROL=true`` gets no region (HAMi-core never loads in it): its GPU
  process is listed by NVML beside the regions' processes, its memory outside HAMi's accounting, and
  placed in its pod's cgroup under ``--proc-root``, the host /proc the monitor reads.
- HAMi-core's files: the ``--hook-path`` directory (the monitor's HOOK_PATH, ``<device plugin
  HOOK_PATH>/vgpu`` on a node) holds libvgpu.so and the ld.so.preload naming it, so ``hami-doctor pod
  --hook-path`` walks the node's files here as on a node.
- Scenarios: the ``scenarios/overlimit`` container uses 1.5 times its vGPU memory limit; the
  ``notebooks/jupyter-idle`` container's last kernel ran two hours ago; the ``scenarios/leaky-trainer``
  container's memory grows by ``--leak-rate`` MiB/s, without the random walk of the others, from 2 to
  26 GiB, then drops back (the job restarts) and grows again: on its over-committed card the rise
  outpaces the other containers' jitter, and the card stays under 90 % full; ``--scenarios`` gives the GPUs
  the hardware faults of ``cluster.fake_nvml_spec``; ``--xid-every`` injects a critical XID (79,
  fallen off the bus) into the last GPU.
- The driver's accounting (``--cgroup-root``, ``hami.demo.simdriver``): a cgroup v2 tree with dmem
  files and the fake NVML's per-cgroup limits, with the ``scenarios/driver-limited`` container limited by
  the driver and the ``scenarios/shim-underreports`` one allocating past HAMi-core.

``python -m hami.demo.simhost --kubeconfig FILE --hook-path DIR --proc-root DIR --bind :9394``
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hami.core import annotations as ann
from hami.core import klog
from hami.core.codec.errors import CodecError
from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.hamicore import control_disabled
from hami.core.kube.client import new_api_client
from hami.core.kube.informer import Informer
from hami.core.kube.options import KubeOptions
from hami.core.nvml.fake import FakeNvml
from hami.demo.simdriver import DriverAccounting, hook_limits
from hami.exporter.config import load_config
from hami.exporter.main import Monitor
from hami.testing import cluster
from hami.testing.kubelet import runtime_env
from hami.testing.regions import MEM_DATA
from hami.testing.simnode import HOST_PID_OFFSET, MIB, SimContainer, SimNode

log = klog.get_logger("hami.demo.simhost")
XID_FALLEN_OFF_BUS = cluster.XID_FALLEN_OFF_BUS
OVERLIMIT_FACTOR = 1.5
IDLE_FOR_S = 7200
UNLIMITED_USE = 6 * 1024 * MIB  # what a container without HAMi-core takes: 3x the demo pod's limit
LEAK_FLOOR, LEAK_CEILING = 2 * 1024 * MIB, 26 * 1024 * MIB  # the leaking container's sawtooth
LIBRARY = b"HAMi-core stand-in: the simulated node never runs it\n"


@dataclass(frozen=True)
class UnlimitedProcess:
    """The GPU process of a container that runs without HAMi-core."""

    gpu: int
    pid: int
    cgroup: str  # its /proc/<pid>/cgroup line (cgroup v2, systemd driver, containerd)
    used: int = UNLIMITED_USE  # bytes it holds on its GPU


def cgroup_line(pod_uid: str, container_id: str) -> str:
    slice_ = f"kubepods-besteffort-pod{pod_uid.replace('-', '_')}.slice"
    return f"0::/kubepods.slice/kubepods-besteffort.slice/{slice_}/cri-containerd-{container_id}.scope\n"


def install_hami_core(vgpu_dir: str) -> None:
    """What the device plugin leaves on a node: libvgpu.so and the ld.so.preload that loads it."""
    os.makedirs(vgpu_dir, exist_ok=True)
    with open(os.path.join(vgpu_dir, "libvgpu.so"), "wb") as f:
        f.write(LIBRARY)
    with open(os.path.join(vgpu_dir, "ld.so.preload"), "w", encoding="utf-8") as f:
        f.write(os.path.join(vgpu_dir, "libvgpu.so") + "\n")


def containers_of(pod: Mapping[str, Any], uuids: list[str]) -> list[SimContainer]:
    """The simulated containers of one running pod: one per container that holds a device of this node
    (a pod the kubelet has not started yet has none: its Allocate has not run)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    value = (meta.get("annotations") or {}).get(ann.POD_DEVICES_ALLOCATED)
    if not value or (pod.get("status") or {}).get("phase") != "Running":
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


def _container_ids(pod: Mapping[str, Any]) -> dict[str, str]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return {str(s.get("name", "")): str(s.get("containerID", "")).rpartition("://")[2] for s in statuses}


class PodDrivenNode(SimNode):
    """A SimNode whose containers follow ``pods()`` at every step, with an over-limit scenario."""

    def __init__(
        self,
        hook_path: str,
        gpus: int,
        pods: Callable[[], list[dict[str, Any]]],
        proc_root: str,
        scenarios: bool = False,
        *,
        leak_rate: float = 4.0,
        clock: Callable[[], float] = time.time,
        cgroup_root: str | None = None,
        node: str = cluster.NODE,
        runtime_dir: str | None = None,
    ) -> None:
        super().__init__(hook_path, gpus, containers=0, clock=clock)
        index = cluster.NODE_INDEX[node]
        self.uuids = [cluster.gpu_uuid(index, i) for i in range(gpus)]
        self.nvml = FakeNvml(cluster.fake_nvml_spec(gpus, scenarios, index))
        self._runtime_dir = None if runtime_dir is None else Path(runtime_dir)
        self._pods = pods
        self._proc_root = proc_root
        self.overlimit: set[str] = set()  # pod uids of the over-limit scenario
        self.idle: set[str] = set()  # pod uids of the idle-vGPU scenario
        self.leaking: set[str] = set()  # pod uids of the over-commit scenario
        self.leak_rate = leak_rate * MIB  # bytes per second
        self._leak_start: float | None = None
        self.unlimited: dict[tuple[str, str], UnlimitedProcess] = {}  # by (pod uid, container)
        self.driver = (
            None if cgroup_root is None else DriverAccounting(cgroup_root, self.nvml, gpus, self.env_of)
        )
        install_hami_core(hook_path)

    def env_of(self, cid: str) -> dict[str, str]:
        """Container ``cid``'s environment as the runtime created it ({} without a runtime dir)."""
        return {} if self._runtime_dir is None or not cid else runtime_env(self._runtime_dir, cid)

    def _unlimited(self, pod: Mapping[str, Any], c: SimContainer) -> UnlimitedProcess | None:
        """The process of ``c`` when its container runs without HAMi-core and the runtime named it."""
        specs = {str(s.get("name", "")): s for s in (pod.get("spec") or {}).get("containers") or []}
        cid = _container_ids(pod).get(c.name, "")
        if not control_disabled(specs.get(c.name, {})) or not cid:
            return None
        known = self.unlimited.get((c.pod_uid, c.name))
        if known is not None:
            return known
        self._next_pid += 1
        return UnlimitedProcess(c.gpu, self._next_pid + HOST_PID_OFFSET, cgroup_line(c.pod_uid, cid))

    def _sync(self) -> None:
        wanted: dict[tuple[str, str], SimContainer] = {}
        unlimited: dict[tuple[str, str], UnlimitedProcess] = {}
        for pod in self._pods():
            for c in containers_of(pod, self.uuids):
                process = self._unlimited(pod, c)
                if process is not None:
                    unlimited[(c.pod_uid, c.name)] = process
                    continue
                # the hook's variables (driver mode): HAMi-core runs without a memory limit
                env = self.env_of(_container_ids(pod).get(c.name, ""))
                c.driver_limited = hook_limits(env)[1] is not None
                wanted[(c.pod_uid, c.name)] = c
                if pod["metadata"]["name"] == cluster.OVERLIMIT.name:
                    self.overlimit.add(c.pod_uid)
                if pod["metadata"]["name"] == cluster.IDLE.name:
                    self.idle.add(c.pod_uid)
                if pod["metadata"]["name"] == cluster.LEAKY.name:
                    self.leaking.add(c.pod_uid)
                    c.scripted = True
        with self._lock:
            kept = []
            for c in self.containers:
                if (c.pod_uid, c.name) in wanted:
                    kept.append(c)
                    del wanted[(c.pod_uid, c.name)]
                elif c.writer is not None:
                    c.writer.close()
            self.containers = kept + list(wanted.values())
            for process in unlimited.values():
                self._write_cgroup(process)
            self.unlimited = unlimited

    def _write_cgroup(self, process: UnlimitedProcess) -> None:
        path = os.path.join(self._proc_root, str(process.pid), "cgroup")
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(process.cgroup)

    def leaked(self, now: float) -> int:
        """What the leaking container holds ``now``: a sawtooth from its first step."""
        if self._leak_start is None:
            self._leak_start = now
        span = LEAK_CEILING - LEAK_FLOOR
        return LEAK_FLOOR + int(self.leak_rate * (now - self._leak_start)) % span

    def step(self) -> None:
        self._sync()
        super().step()
        with self._lock:
            now = self._clock()
            for c in self.containers:
                if c.writer is None or not c.slots:
                    continue
                if c.pod_uid in self.idle:
                    c.writer.set_field("last_kernel_time", int(now) - IDLE_FOR_S)
                target = 0
                if c.pod_uid in self.overlimit:
                    target = max(int(c.mem_limit_mib * MIB * OVERLIMIT_FACTOR), sum(c.used.values()))
                if c.pod_uid in self.leaking:
                    target = self.leaked(now)
                if target:
                    pid = next(iter(c.slots))
                    extra = target - sum(c.used.values())
                    c.writer.change_memory(c.slots[pid], 0, MEM_DATA, extra)
                    c.used[pid] += extra
            # NVML counts every process on a card, HAMi-core's (what the regions account for) and those
            # without it, whose memory no region holds: the reconciler's memory_outside_hami.
            for g in range(len(self.uuids)):
                processes: list[tuple[int, int | None]] = [
                    (pid + HOST_PID_OFFSET, used)
                    for c in self.containers
                    if c.gpu == g
                    for pid, used in c.used.items()
                ]
                processes += [(u.pid, u.used) for u in self.unlimited.values() if u.gpu == g]
                held = sum(used or 0 for _, used in processes)
                self.nvml.update(g, memory_used=min(held, cluster.GPU_MEM_MIB * MIB))
                self.nvml.set_processes(g, processes)
            if self.driver is not None:
                held_by = {(c.pod_uid, c.name): (c.gpu, sum(c.used.values())) for c in self.containers}
                held_by.update({key: (u.gpu, u.used) for key, u in self.unlimited.items()})
                self.driver.sync(self._pods(), held_by)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hami.demo.simhost", description=__doc__)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--hook-path", required=True, help="the monitor's HOOK_PATH (HAMi-core's directory)")
    p.add_argument("--proc-root", required=True, help="the host /proc stand-in the GPU processes live in")
    p.add_argument("--scenarios", action="store_true", help="the GPUs' hardware faults")
    p.add_argument("--bind", default=":9394")
    p.add_argument("--gpus", type=int, default=4)
    p.add_argument("--interval", type=float, default=1.0, help="seconds between simulation steps")
    p.add_argument("--xid-every", type=float, default=0.0, help="inject XID 79 every N seconds (0: never)")
    p.add_argument("--leak-rate", type=float, default=4.0, help="MiB/s the leaking container's memory grows")
    p.add_argument("--cgroup-root", default=None, help="the host cgroup v2 root stand-in (driver accounting)")
    p.add_argument("--enable-tracing", action="store_true", help="the monitor's, with the OTEL_* variables")
    p.add_argument("--node", default=cluster.NODE, choices=(cluster.NODE, cluster.DRIVER_NODE))
    p.add_argument("--runtime-dir", default=None, help="the kubelet stand-in's containers' env (driver mode)")
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
            "--proc-root",
            args.proc_root,
            *(["--cgroup-root", args.cgroup_root] if args.cgroup_root else []),
            *(["--enable-tracing"] if args.enable_tracing else []),
        ],
        {"HOOK_PATH": args.hook_path, "NODE_NAME": args.node},
    )
    api = new_api_client(KubeOptions(kubeconfig=args.kubeconfig, user_agent="hami-simhost"))
    informer = Informer(api, field_selector=f"spec.nodeName={args.node}")
    informer.start()
    if not informer.wait_for_sync(60):
        print("simhost: the pod informer did not sync in 60s", file=sys.stderr)
        informer.stop()
        return 1
    node = PodDrivenNode(
        args.hook_path,
        args.gpus,
        informer.list,
        args.proc_root,
        args.scenarios,
        leak_rate=args.leak_rate,
        cgroup_root=args.cgroup_root,
        node=args.node,
        runtime_dir=args.runtime_dir,
    )
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
        f"simhost: {args.node}, {args.gpus} GPUs, monitor on {monitor.server and monitor.server.url}",
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
