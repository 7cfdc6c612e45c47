"""A rendered chart, installed into the API emulator as a cluster would run it.

The emulator has no controllers, so ``install`` stands in for them: every object is stored as
given, each Deployment gets its replicas and each DaemonSet a pod on every node its nodeSelector
matches, Running and Ready, named as the controllers name them (``hami-scheduler-<hash>-<id>``,
``hami-device-plugin-<id>``), with the workload's status to match. ``downward_env`` resolves a
container's downward-API variables (POD_NAME, NODE_NAME, ...) against its pod, as the kubelet does.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import requests

from hami.testing.kubeapi import Store
from hami.testing.kubeapi.objects import type_of

Obj = dict[str, Any]
_ID_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the controllers' name alphabet


@dataclass
class Installed:
    """The pods the stand-in controllers made, by workload name."""

    pods: dict[str, list[Obj]] = field(default_factory=dict)


def _suffix(key: str, length: int) -> str:
    digest = hashlib.sha256(key.encode()).digest()
    return "".join(_ID_CHARS[b % len(_ID_CHARS)] for b in digest[:length])


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _pod(workload: Obj, name: str, node: str, ip: str, extra_labels: dict[str, str]) -> Obj:
    template = copy.deepcopy(workload["spec"]["template"])
    meta = template.get("metadata") or {}
    spec = template["spec"]
    spec["nodeName"] = node
    containers = [c["name"] for c in spec["containers"]]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": workload["metadata"]["namespace"],
            "labels": {**(meta.get("labels") or {}), **extra_labels},
            "annotations": meta.get("annotations") or {},
            "ownerReferences": [
                {
                    "apiVersion": workload["apiVersion"],
                    "kind": workload["kind"],
                    "name": workload["metadata"]["name"],
                    "uid": workload["metadata"].get("uid", ""),
                    "controller": True,
                }
            ],
        },
        "spec": spec,
        "status": {
            "phase": "Running",
            "podIP": ip,
            "hostIP": ip.rsplit(".", 1)[0] + ".1",
            "conditions": [
                {"type": t, "status": "True"}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
            "containerStatuses": [
                {
                    "name": c,
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {}},
                    "image": next(x["image"] for x in spec["containers"] if x["name"] == c),
                    "imageID": "",
                }
                for c in containers
            ],
        },
    }


def controlled(workloads: Iterable[Obj], nodes: Iterable[Obj]) -> tuple[Installed, list[Obj]]:
    """The pods the controllers would make for ``workloads`` (Deployments, DaemonSets) on ``nodes``,
    and the workloads with their status to match. Pure."""
    installed = Installed()
    node_objs = list(nodes)
    updated = []
    ip = 10
    for workload in workloads:
        kind, name = workload["kind"], workload["metadata"]["name"]
        if kind not in ("Deployment", "DaemonSet"):
            continue
        template_spec = workload["spec"]["template"]["spec"]
        pods = []
        if kind == "Deployment":
            template_hash = _suffix(repr(workload["spec"]["template"]), 10)
            for i in range(int(workload["spec"].get("replicas", 1))):
                node = node_objs[i % len(node_objs)]["metadata"]["name"] if node_objs else "node-1"
                pod_name = f"{name}-{template_hash}-{_suffix(f'{name}/{i}', 5)}"
                pods.append(
                    _pod(workload, pod_name, node, f"10.42.0.{ip}", {"pod-template-hash": template_hash})
                )
                ip += 1
            status = {
                "replicas": len(pods),
                "readyReplicas": len(pods),
                "availableReplicas": len(pods),
                "updatedReplicas": len(pods),
                "observedGeneration": 1,
            }
        else:
            selector = template_spec.get("nodeSelector") or {}
            for n in node_objs:
                if not _matches(selector, (n["metadata"].get("labels") or {})):
                    continue
                node = n["metadata"]["name"]
                pod_name = f"{name}-{_suffix(f'{name}/{node}', 5)}"
                pods.append(_pod(workload, pod_name, node, f"10.42.0.{ip}", {}))
                ip += 1
            count = len(pods)
            status = {
                "desiredNumberScheduled": count,
                "currentNumberScheduled": count,
                "numberReady": count,
                "updatedNumberScheduled": count,
                "numberAvailable": count,
                "numberMisscheduled": 0,
                "observedGeneration": 1,
            }
        updated.append({**workload, "status": status})
        installed.pods[name] = pods
    return installed, updated


def install(store: Store, objects: Iterable[Obj], nodes: Iterable[str] = ()) -> Installed:
    """Store ``objects``, then run their Deployments and DaemonSets (on ``nodes``, which must exist)."""
    for obj in objects:
        store.put(obj, type_of(obj).key)
    return run_workloads(store, nodes)


def run_workloads(store: Store, nodes: Iterable[str] = ()) -> Installed:
    """Pods for every stored Deployment and DaemonSet (after `kubectl apply`, say), as their
    controllers would make them on ``nodes``."""
    node_objs = [n for n in (store.get("nodes", name) for name in nodes) if n is not None]
    workloads = [*store.list("deployments.apps"), *store.list("daemonsets.apps")]
    installed, updated = controlled(workloads, node_objs)
    for workload in updated:
        store.put(workload)
    installed.pods = {name: [store.put(p) for p in pods] for name, pods in installed.pods.items()}
    return installed


def _collection(obj: Obj) -> str:
    rtype = type_of(obj)
    prefix = f"/apis/{rtype.group}/{rtype.version}" if rtype.group else f"/api/{rtype.version}"
    namespace = f"/namespaces/{obj['metadata']['namespace']}" if rtype.namespaced else ""
    return f"{prefix}{namespace}/{rtype.plural}"


def install_over_http(
    api_url: str, objects: Iterable[Obj], nodes: Iterable[Obj], timeout: float = 10.0
) -> Installed:
    """``install`` through the API (the demo's emulator runs in its own process): create every
    object, then the controllers' pods, then write the statuses (a create resets a pod's)."""
    objects = list(objects)
    installed, updated = controlled(objects, nodes)
    pods = [p for group in installed.pods.values() for p in group]
    with requests.Session() as session:
        for obj in [*objects, *pods]:
            reply = session.post(api_url + _collection(obj), json=obj, timeout=timeout)
            if reply.status_code != 201:
                raise RuntimeError(
                    f"creating {obj['kind']} {obj['metadata']['name']}: {reply.status_code} {reply.text}"
                )
        for obj in [*updated, *pods]:
            url = f"{api_url}{_collection(obj)}/{obj['metadata']['name']}/status"
            reply = session.patch(
                url,
                json={"status": obj["status"]},
                headers={"Content-Type": "application/merge-patch+json"},
                timeout=timeout,
            )
            if reply.status_code != 200:
                raise RuntimeError(
                    f"status of {obj['kind']} {obj['metadata']['name']}: {reply.status_code} {reply.text}"
                )
    return installed


def downward_env(pod: Obj, container: str) -> dict[str, str]:
    """The container's env as the kubelet sets it: literal values and downward-API fields."""
    fields = {
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "status.podIP": (pod.get("status") or {}).get("podIP", ""),
    }
    (spec,) = [c for c in pod["spec"]["containers"] if c["name"] == container]
    env = {}
    for var in spec.get("env") or []:
        if "value" in var:
            env[var["name"]] = str(var["value"])
        elif "fieldRef" in (var.get("valueFrom") or {}):
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
    return env
