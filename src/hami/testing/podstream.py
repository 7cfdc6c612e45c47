"""A seeded stream of GPU pods and the cluster they are scheduled on, for the side-by-side comparison
of HAMi's scheduler and ours (``hami.testing.sidebyside``).

Pure: ``seed`` in, Kubernetes objects out. The cluster mixes card types, sizes, split counts, NUMA
nodes and GPU pair scores (for ``topology-aware``); the pods vary what HAMi's guides let a user vary:
card count, memory in MiB or percent, cores (``100`` takes a card exclusively; a few ask for more
than 100), ``use-gputype``/``nouse-gputype``, ``use-gpuuuid``/``nouse-gpuuuid``, the node and GPU
policies, ``numa-bind``, init containers, several containers, namespaces under a ResourceQuota, and
requests that fit nowhere. Each pod lives for a number of later pods (``Step.delete``), so the
cluster fills, churns and frees.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hami.core import annotations as ann
from hami.core.codec.handshake import REPORTED, Handshake, format_handshake
from hami.core.codec.node_devices import encode_node_devices, encode_pair_scores
from hami.testing.builders import dev, limits, node

Obj = dict[str, Any]
SCHEDULER = "hami-scheduler"


@dataclass(frozen=True)
class NodeShape:
    name: str
    gpu_type: str
    gpus: int
    mem_mib: int
    split: int
    numa_split: bool  # the second half of its cards on NUMA node 1
    pairs: bool  # registers GPU pair scores (NVLink-like: neighbours score high)


CLUSTER: tuple[NodeShape, ...] = (
    NodeShape("gpu-a100-0", "NVIDIA A100-SXM4-40GB", 4, 40960, 10, True, True),
    NodeShape("gpu-a100-1", "NVIDIA A100-SXM4-40GB", 4, 40960, 4, True, False),
    NodeShape("gpu-h100-0", "NVIDIA H100 80GB HBM3", 8, 81559, 10, True, True),
    NodeShape("gpu-l4-0", "NVIDIA L4", 4, 23034, 10, False, False),
    NodeShape("gpu-l4-1", "NVIDIA L4", 2, 23034, 10, False, False),
    NodeShape("gpu-t4-0", "NVIDIA-Tesla T4", 2, 15360, 10, False, False),
)
TYPE_WORDS = ("A100", "H100", "L4", "T4", "V100")  # V100: a type no node has
QUOTA_NS = "team-quota"
NAMESPACES = ("default", "ml-train", "ml-infer", QUOTA_NS)


def gpu_uuid(node_index: int, i: int) -> str:
    return f"GPU-{node_index:04x}{i:04x}-0000-4000-8000-{node_index * 100 + i:012x}"


def cluster_nodes(now: datetime, shapes: tuple[NodeShape, ...] = CLUSTER) -> list[Obj]:
    """The nodes as a device plugin registers them (HAMi's annotation format), handshake answered."""
    out = []
    for n, s in enumerate(shapes):
        uuids = [gpu_uuid(n, i) for i in range(s.gpus)]
        devs = [
            dev(uuids[i], s.mem_mib, count=s.split, index=i, type=s.gpu_type,
                numa=int(s.numa_split and i >= s.gpus // 2))
            for i in range(s.gpus)
        ]  # fmt: skip
        annotations = {
            ann.NODE_REGISTER: encode_node_devices(devs),
            ann.NODE_HANDSHAKE: format_handshake(Handshake(REPORTED, now)),
        }
        if s.pairs:
            scores = {a: {b: (100 if abs(i - j) == 1 else 20) for j, b in enumerate(uuids) if b != a}
                      for i, a in enumerate(uuids)}  # fmt: skip
            annotations[ann.NODE_PAIR_SCORE] = encode_pair_scores(scores)
        resources = {"cpu": "64", "memory": "512Gi", "pods": "110", ann.RESOURCE_GPU: str(s.gpus * s.split)}
        out.append(node(
            s.name, labels={"kubernetes.io/hostname": s.name, "gpu": "on"}, annotations=annotations,
            capacity=resources, allocatable=resources, conditions=[{"type": "Ready", "status": "True"}],
        ))  # fmt: skip
    return out


def quota() -> Obj:
    """The quota of ``QUOTA_NS``: 60 GiB of vGPU memory and 300 cores in all."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu-quota", "namespace": QUOTA_NS},
        "spec": {"hard": {"limits.nvidia.com/gpumem": "61440", "limits.nvidia.com/gpucores": "300"}},
    }


@dataclass(frozen=True)
class Step:
    pod: Obj
    delete: tuple[str, ...]  # "namespace/name" of earlier pods to delete before this one


def _gpu_limits(r: random.Random, shapes: tuple[NodeShape, ...]) -> dict[str, str]:
    count = r.choices((1, 2, 3, 4, 8, 9), (60, 20, 5, 10, 4, 1))[0]  # 9: more cards than any node has
    mem: int | None = None
    pct: int | None = None
    kind = r.random()
    if kind < 0.55:
        mem = r.choice((512, 1024, 2048, 4000, 8192, 12000, 16384, 20000, 30000, 40960, 90000))
    elif kind < 0.75:
        pct = r.choice((5, 10, 25, 50, 75, 100))
    cores = r.choices((None, 0, 10, 25, 30, 50, 60, 100, 120), (30, 5, 15, 10, 5, 10, 5, 15, 1))[0]
    return limits(count, mem, cores, pct)


def _annotations(r: random.Random, shapes: tuple[NodeShape, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    if r.random() < 0.15:
        out[ann.POD_USE_GPUTYPE] = ",".join(r.sample(TYPE_WORDS, r.choice((1, 1, 2))))
    elif r.random() < 0.1:
        out[ann.POD_NOUSE_GPUTYPE] = r.choice(TYPE_WORDS)
    if r.random() < 0.06:
        n = r.randrange(len(shapes))
        uuids = [gpu_uuid(n, i) for i in r.sample(range(shapes[n].gpus), r.choice((1, 1, 2)))]
        out[r.choice((ann.POD_USE_GPUUUID, ann.POD_NOUSE_GPUUUID))] = ",".join(uuids)
    if r.random() < 0.3:
        out[ann.POD_NODE_SCHEDULER_POLICY] = r.choice(("binpack", "spread"))
    if r.random() < 0.35:
        out[ann.POD_GPU_SCHEDULER_POLICY] = r.choice(("binpack", "spread", "topology-aware"))
    if r.random() < 0.08:
        out[ann.POD_NUMA_BIND] = "true"
    return out


def _container(name: str, lim: dict[str, str] | None) -> Obj:
    resources = {"limits": lim} if lim else {"limits": {"cpu": "1"}}
    return {"name": name, "image": "pytorch:24.01", "resources": resources}


def make_pod(r: random.Random, i: int, shapes: tuple[NodeShape, ...] = CLUSTER) -> Obj:
    containers = [_container("main", _gpu_limits(r, shapes))]
    if r.random() < 0.12:
        containers.append(_container("side", _gpu_limits(r, shapes) if r.random() < 0.6 else None))
    init = [_container("init", _gpu_limits(r, shapes))] if r.random() < 0.08 else []
    namespace = r.choices(NAMESPACES, (40, 20, 20, 20))[0]
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{i:05d}", "namespace": namespace, "annotations": _annotations(r, shapes)},
        "spec": {"schedulerName": SCHEDULER, "containers": containers},
    }
    if init:
        pod["spec"]["initContainers"] = init
    return pod


def stream(seed: int, count: int, shapes: tuple[NodeShape, ...] = CLUSTER,
           lifetime: tuple[int, int] = (4, 40)) -> list[Step]:  # fmt: skip
    """``count`` steps: pod ``i`` lives for a random number (``lifetime``) of later pods."""
    r = random.Random(seed)
    expiry: dict[int, list[str]] = {}
    steps = []
    for i in range(count):
        pod = make_pod(r, i, shapes)
        meta = pod["metadata"]
        expiry.setdefault(i + r.randint(*lifetime), []).append(f"{meta['namespace']}/{meta['name']}")
        steps.append(Step(pod, tuple(expiry.pop(i, ()))))
    return steps
