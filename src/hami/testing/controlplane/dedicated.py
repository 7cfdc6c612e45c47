"""GPU nodes and pods of one test on the shared real control plane: its nodes are tainted
``hami.test/dedicated=<owner>:NoSchedule`` and its pods tolerate that taint and select those nodes,
so no other test's pod lands on them and its pods land nowhere else (kube-scheduler filters taints
before it calls the extender).

    node = dedicated_node(cp, "d-gpu", owner="d", cards=8)
    pod = dedicated_pod("d-0", owner="d", mem=8000, scheduler="hami-scheduler")
    created = create(cp, pod); ...; remove(cp, owner="d")
"""

from __future__ import annotations

from typing import Any

from hami.core import annotations as ann
from hami.core.codec.pod_devices import decode_pod_devices
from hami.testing import builders
from hami.testing.controlplane.run import ControlPlane

Obj = dict[str, Any]
TAINT = "hami.test/dedicated"
OWNER_LABEL = "hami.test/owner"
SPLIT = 10  # slots per card (builders.gpu_node's default)
NAMESPACE = "default"


def dedicated_node(cp: ControlPlane, name: str, *, owner: str, cards: int, mem: int = 8000) -> Obj:
    """A Ready GPU node of ``cards`` cards of ``mem`` MiB (UUIDs ``GPU-<name>-<i>``), registered as
    the device plugin registers it, tainted for ``owner``."""
    node = builders.gpu_node(name, gpus=cards, mem=mem, count=SPLIT)
    node["metadata"]["labels"] = {"kubernetes.io/hostname": name, OWNER_LABEL: owner}
    node["spec"] = {"taints": [{"key": TAINT, "value": owner, "effect": "NoSchedule"}]}
    node.pop("status", None)
    return cp.create_node(node, cards * SPLIT)


def dedicated_pod(name: str, *, owner: str, mem: int, scheduler: str) -> Obj:
    """A pod asking for one vGPU of ``mem`` MiB, for ``scheduler``, only on ``owner``'s nodes."""
    pod = builders.gpu_pod(name, mem=mem, namespace=NAMESPACE, labels={OWNER_LABEL: owner})
    pod["spec"]["containers"][0]["image"] = "busybox"  # never pulled: no kubelet runs there
    pod["spec"]["schedulerName"] = scheduler
    pod["spec"]["nodeSelector"] = {OWNER_LABEL: owner}
    pod["spec"]["tolerations"] = [{"key": TAINT, "operator": "Equal", "value": owner, "effect": "NoSchedule"}]
    pod.pop("status", None)
    return pod


def create(cp: ControlPlane, pod: Obj) -> Obj:
    with cp.session() as s:
        reply = s.post(f"{cp.url}/api/v1/namespaces/{NAMESPACE}/pods", json=pod, timeout=60)
    if reply.status_code != 201:
        raise AssertionError(f"creating pod {pod['metadata']['name']}: {reply.status_code} {reply.text}")
    created: Obj = reply.json()
    return created


def pods(cp: ControlPlane, owner: str) -> list[Obj]:
    with cp.session() as s:
        reply = s.get(
            f"{cp.url}/api/v1/namespaces/{NAMESPACE}/pods",
            params={"labelSelector": f"{OWNER_LABEL}={owner}"},
            timeout=60,
        )
    reply.raise_for_status()
    items: list[Obj] = reply.json()["items"]
    return items


def cards_of(pod: Obj) -> list[str]:
    """The card UUIDs the scheduler gave the pod (``hami.io/vgpu-devices-allocated``)."""
    text = (pod["metadata"].get("annotations") or {}).get(ann.POD_DEVICES_ALLOCATED, "")
    return [d.uuid for container in decode_pod_devices(text) for d in container] if text else []


def remove(cp: ControlPlane, owner: str) -> None:
    """Deletes ``owner``'s pods (at once: no kubelet would confirm a graceful delete) and nodes."""
    selector = {"labelSelector": f"{OWNER_LABEL}={owner}"}
    with cp.session() as s:
        s.delete(f"{cp.url}/api/v1/namespaces/{NAMESPACE}/pods", params=selector,
                 json={"gracePeriodSeconds": 0}, timeout=60)  # fmt: skip
        s.delete(f"{cp.url}/api/v1/nodes", params=selector, timeout=60)
