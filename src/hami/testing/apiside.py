"""One API server and the scheduler extender that watches it, over HTTP, for the side-by-side runs
(``hami.testing.sidebyside``): pods created, filtered, bound and deleted as kube-scheduler and the
device plugin would; the cluster seeded; the extender's readiness and settled metrics awaited."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from hami.core import annotations as ann
from hami.core import reasons
from hami.testing.wait import wait_until

Obj = dict[str, Any]
TIMEOUT = 30.0
NOW_DELETE = {"gracePeriodSeconds": 0}
BIND_RETRY_S = 5.0
ALLOCATED_FAMILY = "hami_vgpu_memory_allocated_bytes"
CARD_MEMORY = re.compile(r"^hami_gpu_memory_allocated_bytes\{[^}]*\} (\S+)$", re.MULTILINE)
ALLOCATED_LINE = re.compile(r"^" + ALLOCATED_FAMILY + r"\{([^}]*)\}", re.MULTILINE)
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass
class Side:
    """One API server and the extender that watches it."""

    name: str
    api: str
    extender: str
    metrics: str
    session: requests.Session = field(default_factory=requests.Session)

    def pods_path(self, namespace: str) -> str:
        return f"{self.api}/api/v1/namespaces/{namespace}/pods"

    def create(self, obj: Obj) -> Obj:
        r = self.session.post(self.pods_path(obj["metadata"]["namespace"]), json=obj, timeout=TIMEOUT)
        r.raise_for_status()
        created: Obj = r.json()
        return created

    def get(self, key: str) -> Obj:
        ns, name = key.split("/")
        r = self.session.get(f"{self.pods_path(ns)}/{name}", timeout=TIMEOUT)
        r.raise_for_status()
        got: Obj = r.json()
        return got

    def delete(self, key: str) -> None:
        ns, name = key.split("/")
        # at once, as the kubelet stand-in would finish a graceful deletion
        r = self.session.delete(f"{self.pods_path(ns)}/{name}", json=NOW_DELETE, timeout=TIMEOUT)
        if r.status_code not in (200, 202, 404):
            r.raise_for_status()

    def filter(self, pod: Obj, nodes: Sequence[str]) -> Obj:
        r = self.session.post(self.extender + "/filter", json={"Pod": pod, "NodeNames": list(nodes)},
                              timeout=TIMEOUT)  # fmt: skip
        if r.status_code != 200:
            return {"Error": f"HTTP {r.status_code}: {r.text.strip()[:300]}"}
        body: Obj = r.json()
        return body

    def bind(self, pod: Obj, node: str) -> str:
        """POST /bind; the ExtenderBindingResult's Error. HAMi binds from its informer's cache, which
        may not hold a pod created a moment ago: "not found" is retried for a while."""
        meta = pod["metadata"]
        args = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"],
                "Node": node}  # fmt: skip
        deadline = time.monotonic() + BIND_RETRY_S
        while True:
            r = self.session.post(self.extender + "/bind", json=args, timeout=TIMEOUT)
            error = str(r.json().get("Error") or "") if r.status_code == 200 else f"HTTP {r.status_code}"
            if "not found" not in error or time.monotonic() > deadline:
                return error
            time.sleep(0.01)

    def allocated(self, key: str, node: str) -> None:
        """What the device plugin does once kubelet's Allocate succeeds: the pod's bind phase becomes
        success and the node lock is released."""
        ns, name = key.split("/")
        merge = {"Content-Type": "application/merge-patch+json"}
        body = {"metadata": {"annotations": {ann.POD_BIND_PHASE: ann.BIND_PHASE_SUCCESS}}}
        self.session.patch(f"{self.pods_path(ns)}/{name}", json=body, headers=merge, timeout=TIMEOUT)
        release: Obj = {"metadata": {"annotations": {ann.NODE_LOCK: None}}}
        self.session.patch(f"{self.api}/api/v1/nodes/{node}", json=release, headers=merge, timeout=TIMEOUT)

    def allocated_pods(self) -> set[str]:
        """``namespace/pod`` of every reservation the extender's metrics show (a line scan: parsing
        the whole exposition at every step would cost more than the step)."""
        text = self.session.get(self.metrics + "/metrics", timeout=TIMEOUT).text
        out = set()
        for m in ALLOCATED_LINE.finditer(text):
            labels = dict(LABEL.findall(m.group(1)))
            out.add(f"{labels.get('namespace', '')}/{labels.get('pod', '')}")
        return out

    def events(self) -> dict[str, Counter[tuple[str, str, str]]]:
        r = self.session.get(f"{self.api}/api/v1/events", timeout=TIMEOUT)
        r.raise_for_status()
        out: dict[str, Counter[tuple[str, str, str]]] = {}
        for e in r.json().get("items") or []:
            obj = e.get("involvedObject") or {}
            key = f"{obj.get('namespace', '')}/{obj.get('name', '')}"
            out.setdefault(key, Counter())[(e.get("type", ""), e.get("reason", ""), _normal(e))] += e.get(
                "count", 1
            ) or 1
        return out


def _normal(event: Obj) -> str:
    """The message, with a FilteringSucceed's node scores as a sorted set (HAMi orders equal scores by
    an unstable sort)."""
    msg = str(event.get("message", ""))
    fields = reasons.FIT.read(msg)
    if fields is None:
        return msg
    labels = ",".join(sorted(x for x in fields["scores"].split(",") if x))
    return f"find fit node(*), {fields['unfit']} nodes not fit, fit({labels})"


def seed(api: str, nodes: Sequence[Obj], quotas: Sequence[Obj], namespaces: Iterable[str] = (),
         session: requests.Session | None = None) -> None:  # fmt: skip
    """The namespaces, the nodes (then their status, which a create leaves out) and the quotas,
    created through the API (a real kube-apiserver needs the namespaces first)."""
    s = session or requests.Session()
    for ns in namespaces:
        r = s.post(f"{api}/api/v1/namespaces", json={"metadata": {"name": ns}}, timeout=TIMEOUT)
        if r.status_code not in (200, 201, 409):
            r.raise_for_status()
    merge = {"Content-Type": "application/merge-patch+json"}
    for node in nodes:
        body = {k: v for k, v in node.items() if k != "status"}
        s.post(f"{api}/api/v1/nodes", json=body, timeout=TIMEOUT).raise_for_status()
        url = f"{api}/api/v1/nodes/{node['metadata']['name']}/status"
        s.patch(url, json={"status": node["status"]}, headers=merge, timeout=TIMEOUT).raise_for_status()
    for q in quotas:
        ns = q["metadata"]["namespace"]
        s.post(f"{api}/api/v1/namespaces/{ns}/resourcequotas", json=q, timeout=TIMEOUT).raise_for_status()


def series(side: Side, family: str) -> list[dict[str, str]]:
    text = side.session.get(side.metrics + "/metrics", timeout=TIMEOUT).text
    found = (fam for fam in text_string_to_metric_families(text) if fam.name == family)
    return [s.labels for fam in found for s in fam.samples]


def wait_ready(side: Side, gpus: int, quota_namespaces: Iterable[str] = (), timeout: float = 60.0) -> None:
    """Until the extender shows every GPU (``hami_gpu_memory_limit_bytes``) and every quota."""
    namespaces = set(quota_namespaces)

    def ready() -> bool:
        try:
            return _ready()
        except requests.RequestException:  # HAMi's scrape waits while a register pass holds its lock
            return False

    def _ready() -> bool:
        quotas = {s["namespace"] for s in series(side, "hami_resource_quota_limit")}
        return len(series(side, "hami_gpu_memory_limit_bytes")) == gpus and namespaces <= quotas

    wait_until(ready, timeout, f"{side.name} to register {gpus} GPUs", interval=0.2)


def settled_metrics(side: Side, timeout: float = 60.0) -> str:
    """A scrape whose per-card families count every reservation. HAMi computes them at its register
    passes (every 15 s, or when a node is added), ours at scrape time: a node without GPUs is added,
    then the card memory must be the same in two scrapes in a row."""
    name = f"settle-{side.name}-{time.monotonic_ns()}"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    side.session.post(f"{side.api}/api/v1/nodes", json=node, timeout=TIMEOUT).raise_for_status()
    last: list[float] = [-1.0]

    def check() -> str | None:
        text = side.session.get(side.metrics + "/metrics", timeout=TIMEOUT).text
        total = sum(float(m.group(1)) for m in CARD_MEMORY.finditer(text))
        stable, last[0] = total == last[0], total
        return text if stable else None

    return wait_until(check, timeout, f"{side.name}'s card metrics to settle", interval=0.5)
