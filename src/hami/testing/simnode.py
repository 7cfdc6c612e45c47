"""A simulated GPU node: fake NVML plus containers whose processes come, allocate, compute and exit.

Each container writes a real HAMi-core region file (``hami.testing.regions``) under
``<hook_path>/containers/<podUID>_<name>/``; some start CUDA only after a while (allocated but idle).
``python -m hami.testing.simnode --hook-path DIR`` serves the monitor on this node at :9394.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hami.core.nvml.fake import FakeNvml
from hami.testing.regions import MEM_CONTEXT, MEM_DATA, MEM_MODULE, RegionWriter

MIB = 1 << 20
GPU_MEM_MIB = 40960
HOST_PID_OFFSET = 10000  # a process's PID on the host: its PID in the container plus this


@dataclass
class SimContainer:
    pod_uid: str
    pod: str
    name: str
    gpu: int
    mem_limit_mib: int
    core_limit: int
    start_after: int  # steps before the first CUDA call creates the region
    scripted: bool = False  # one process whose memory a scenario sets: no random walk, no churn
    # the driver holds its memory limit (a device plugin in driver mode): HAMi-core's region has none,
    # and its use still stays within mem_limit_mib
    driver_limited: bool = False
    writer: RegionWriter | None = None
    slots: dict[int, int] = field(default_factory=dict)  # pid -> slot
    used: dict[int, int] = field(default_factory=dict)  # pid -> bytes held


class SimNode:
    def __init__(
        self,
        hook_path: str,
        gpus: int = 8,
        containers: int = 10,
        *,
        seed: int = 0,
        version: str = "v1.2",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.hook_path = hook_path
        self.version = version
        self._clock = clock
        self._rng = random.Random(seed)
        self.uuids = [f"GPU-{i:08x}-{seed:04x}-4000-8000-{i:012x}" for i in range(gpus)]
        self.nvml = FakeNvml(
            {
                "devices": [
                    {"uuid": u, "name": "NVIDIA A100-SXM4-40GB", "memory_mib": GPU_MEM_MIB, "temperature": 40}
                    for u in self.uuids
                ]
            }
        )
        self.containers: list[SimContainer] = []
        for i in range(containers):
            self.containers.append(
                SimContainer(
                    pod_uid=str(uuidlib.UUID(int=self._rng.getrandbits(128), version=4)),
                    pod=f"sim-pod-{i}",
                    name="main",
                    gpu=i % gpus,
                    mem_limit_mib=self._rng.choice((2048, 4096, 8192)),
                    core_limit=self._rng.choice((0, 20, 30, 50)),
                    start_after=0 if i % 5 else 3,  # every fifth container starts CUDA late
                )
            )
        self._next_pid = 100
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.steps = 0
        os.makedirs(os.path.join(hook_path, "containers"), exist_ok=True)

    def pods(self) -> list[dict[str, Any]]:
        """The pod objects of this node, as the API would return them, with HAMi's annotations."""
        out = []
        for c in self.containers:
            alloc = f"{self.uuids[c.gpu]},NVIDIA,{c.mem_limit_mib},{c.core_limit}:;"
            out.append(
                {
                    "metadata": {
                        "uid": c.pod_uid,
                        "name": c.pod,
                        "namespace": "sim",
                        "labels": {"app": c.pod, "hami.io/vgpu-node": "sim-node"},
                        "annotations": {"hami.io/vgpu-devices-allocated": alloc},
                    },
                    "spec": {"nodeName": "sim-node", "containers": [{"name": c.name}]},
                    "status": {"phase": "Running"},
                }
            )
        return out

    def _open_region(self, c: SimContainer) -> RegionWriter:
        d = os.path.join(self.hook_path, "containers", f"{c.pod_uid}_{c.name}")
        os.makedirs(d, exist_ok=True)
        open(os.path.join(d, "libvgpu.so"), "ab").close()
        w = RegionWriter.create(
            os.path.join(d, f"{uuidlib.UUID(int=self._rng.getrandbits(128))}.cache"), self.version
        )
        limit = 0 if c.driver_limited else c.mem_limit_mib * MIB
        w.initialise([self.uuids[c.gpu]], limits=[limit], sm_limits=[c.core_limit])
        return w

    def step(self) -> None:
        """One tick: processes start, allocate/free, compute, exit; NVML follows the sum."""
        rng = self._rng
        with self._lock:
            self.steps += 1
            for c in self.containers:
                if c.writer is None:
                    if self.steps <= c.start_after:
                        continue
                    c.writer = self._open_region(c)
                w = c.writer
                if not c.slots or (not c.scripted and len(c.slots) < 3 and rng.random() < 0.2):
                    pid = self._next_pid = self._next_pid + 1
                    slot = w.add_process(pid, hostpid=pid + HOST_PID_OFFSET)
                    c.slots[pid], c.used[pid] = slot, 0
                    w.change_memory(slot, 0, MEM_CONTEXT, 300 * MIB)
                    w.change_memory(slot, 0, MEM_MODULE, 20 * MIB)
                    c.used[pid] = 320 * MIB
                for pid in list(c.slots):
                    slot = c.slots[pid]  # fresh: a compaction may have moved it
                    room = c.mem_limit_mib * MIB - sum(c.used.values())
                    delta = rng.randrange(-c.used[pid] // 4 - 1, max(room // 4, 1)) // MIB * MIB
                    delta = max(delta, -(c.used[pid] - 320 * MIB))
                    if delta and not c.scripted:
                        w.change_memory(slot, 0, MEM_DATA, delta)
                        c.used[pid] += delta
                    w.set_sm_util(slot, 0, rng.randrange(0, (c.core_limit or 100) + 1) // len(c.slots))
                    w.launch_kernel(int(self._clock()))
                    if len(c.slots) > 1 and not c.scripted and rng.random() < 0.1:
                        w.exit_process(slot)
                        del c.slots[pid], c.used[pid]
                        w.compact()  # moves the last slot into the hole
                        c.slots = {p: i for i, p in enumerate(w.pids())}
            for g in range(len(self.uuids)):
                held = sum(sum(c.used.values()) for c in self.containers if c.gpu == g)
                util = rng.randrange(0, 100)
                self.nvml.update(g, memory_used=min(held, GPU_MEM_MIB * MIB), utilization_gpu=util)

    def start(self, interval_s: float = 1.0) -> None:
        def run() -> None:
            while not self._stop.wait(interval_s):
                self.step()

        self.step()
        self._thread = threading.Thread(target=run, name="simnode", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        with self._lock:
            for c in self.containers:
                if c.writer is not None:
                    c.writer.close()
                    c.writer = None


def main(argv: list[str] | None = None) -> int:
    from hami.core import klog
    from hami.exporter.config import load_config
    from hami.exporter.main import Monitor

    p = argparse.ArgumentParser(prog="simnode", description="serve the monitor on a simulated GPU node")
    p.add_argument("--hook-path", required=True)
    p.add_argument("--bind", default=":9394")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--containers", type=int, default=10)
    p.add_argument("--interval", type=float, default=1.0)
    args = p.parse_args(argv)
    klog.setup(0)
    node = SimNode(args.hook_path, args.gpus, args.containers)
    cfg = load_config(
        ["--metrics-bind-address", args.bind, "--pod-labels-allowlist", "app"],
        {"HOOK_PATH": args.hook_path, "NODE_NAME": "sim-node"},
    )
    node.start(args.interval)
    monitor = Monitor(cfg, node.nvml, node.pods, lambda: {c.pod_uid for c in node.containers})
    monitor.start()
    print(f"simnode: serving {monitor.server.url if monitor.server else args.bind}/metrics", file=sys.stderr)
    stop = threading.Event()
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    monitor.stop()
    node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
