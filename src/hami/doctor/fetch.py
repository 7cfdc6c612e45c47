"""One-shot reads from the API server for the checks (GET and LIST only; writes live in fix.py)."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import requests

from hami.core import annotations as ann
from hami.core.kube import errors, raw
from hami.core.objects import annotations_of, name_of, namespace_of
from hami.doctor.podinputs import PodCluster, lease_of
from hami.doctor.settings import DEVICE_PLUGIN_SELECTORS, SCHEDULER_SELECTORS

Obj = dict[str, Any]


def get_pod(api: Any, namespace: str, name: str) -> Obj:
    pod: Obj = raw.request_json(api, "GET", raw.resource_path("", "v1", "pods", namespace, name))
    return pod


def pod_exists(api: Any, namespace: str, name: str) -> bool:
    try:
        get_pod(api, namespace, name)
    except errors.NotFound:
        return False
    return True


def get_node(api: Any, name: str) -> Obj:
    node: Obj = raw.request_json(api, "GET", raw.resource_path("", "v1", "nodes", name=name))
    return node


def list_nodes(api: Any, selector: str = "") -> list[Obj]:
    query = [("labelSelector", selector)] if selector else []
    return _items(raw.request_json(api, "GET", raw.resource_path("", "v1", "nodes"), query=query))


def list_all(api: Any, path: str, page: int = 500) -> list[Obj]:
    """Every object of a collection, read in pages of ``page`` (limit/continue)."""
    items: list[Obj] = []
    token = ""
    while True:
        query = [("limit", str(page))] + ([("continue", token)] if token else [])
        doc = raw.request_json(api, "GET", path, query=query)
        items += _items(doc)
        token = str(((doc or {}).get("metadata") or {}).get("continue") or "")
        if not token:
            return items


def pod_events(api: Any, namespace: str, name: str) -> list[Obj]:
    query = [("fieldSelector", f"involvedObject.kind=Pod,involvedObject.name={name}")]
    return _items(raw.request_json(api, "GET", raw.resource_path("", "v1", "events", namespace), query=query))


def scheduler_pods(api: Any, namespace: str = "") -> list[Obj] | None:
    """Pods of the HAMi scheduler by either known label; None when listing is forbidden."""
    return _pods_by_selectors(api, SCHEDULER_SELECTORS, namespace)


def device_plugin_pods(api: Any) -> list[Obj] | None:
    """Pods of the HAMi device plugin, in any namespace, by either known label; None when forbidden."""
    return _pods_by_selectors(api, DEVICE_PLUGIN_SELECTORS, "")


def _pods_by_selectors(api: Any, selectors: tuple[str, ...], namespace: str) -> list[Obj] | None:
    found: dict[str, Obj] = {}
    path = raw.resource_path("", "v1", "pods", namespace or None)
    for selector in selectors:
        try:
            items = _items(raw.request_json(api, "GET", path, query=[("labelSelector", selector)]))
        except errors.ApiError as exc:
            if exc.status in (401, 403):
                return None
            raise
        for p in items:
            found[f"{namespace_of(p)}/{name_of(p)}"] = p
    return [found[k] for k in sorted(found)]


def get_lease(api: Any, namespace: str, name: str) -> Obj | None:
    try:
        lease: Obj = raw.request_json(
            api, "GET", raw.resource_path("coordination.k8s.io", "v1", "leases", namespace, name)
        )
    except errors.NotFound:
        return None
    return lease


def lock_owners(api: Any, nodes: list[Obj]) -> dict[str, bool]:
    """For every node lock with an owner, whether that pod still exists ("ns/name" → bool)."""
    out: dict[str, bool] = {}
    for node in nodes:
        parts = annotations_of(node).get(ann.NODE_LOCK, "").split(",")
        if len(parts) == 3 and parts[1] and parts[2]:
            key = f"{parts[1]}/{parts[2]}"
            if key not in out:
                out[key] = pod_exists(api, parts[1], parts[2])
    return out


def pod_cluster(
    api: Any, namespace: str, name: str, *, scheduler_namespace: str = "", lease_ref: str = "",
    scheduler_url: str = "",
) -> PodCluster:  # fmt: skip
    pod = get_pod(api, namespace, name)
    if scheduler_url:
        decision, source = decision_from_url(scheduler_url, namespace, name)
    else:
        decision, source = decision_via_service(api, namespace, name, scheduler_namespace)
    nodes = list_nodes(api)
    schedulers = scheduler_pods(api, scheduler_namespace)
    # Without --scheduler-lease, the Lease the extenders follow, as their own flags name it.
    lease_ref = lease_ref or lease_of(schedulers or [])
    lease = None
    if lease_ref:
        lease_ns, _, lease_name = lease_ref.partition("/")
        lease = get_lease(api, lease_ns, lease_name)
    return PodCluster(
        pod=pod,
        events=pod_events(api, namespace, name),
        scheduler_pods=schedulers,
        lease=lease,
        lease_ref=lease_ref,
        nodes={name_of(n): n for n in nodes},
        owner_exists=lock_owners(api, nodes),
        decision=decision,
        decision_source=source,
    )


# The scheduler's metrics Service (the chart labels it hami.io/job=hami-scheduler) and the path its
# decision record is served on.
SCHEDULER_SERVICE_SELECTOR = "hami.io/job=hami-scheduler"
DECISIONS = "/debug/decisions"
LOCK_TIMEOUT_METRIC = "hami_scheduler_node_lock_timeout_seconds"
_LOCK_TIMEOUT_SAMPLE = re.compile(rf"^{LOCK_TIMEOUT_METRIC}(?:{{[^}}]*}})? ([0-9.e+]+)$", re.M)


def lock_timeout_from_url(url: str, timeout: float = 10.0) -> timedelta | None:
    """The scheduler's own ``--node-lock-timeout``, from its metrics at ``url`` (None: not readable).

    The doctor judges a lock by the scheduler's expiry, so that it calls a lock expired exactly when
    the scheduler (and the alerts that read it) stop counting it as holding the node."""
    try:
        got = requests.get(
            f"{url.rstrip('/')}/metrics", params={"name[]": LOCK_TIMEOUT_METRIC}, timeout=timeout
        )
    except requests.RequestException:
        return None
    found = _LOCK_TIMEOUT_SAMPLE.search(got.text) if got.status_code == 200 else None
    if found is None:
        return None
    try:
        seconds = float(found.group(1))
    except ValueError:
        return None
    return timedelta(seconds=seconds) if 0 < seconds < 10**9 else None


def decision_from_url(url: str, namespace: str, name: str, timeout: float = 10.0) -> tuple[Obj | None, str]:
    """The pod's decision record from the scheduler's metrics URL, or None and why not."""
    target = f"{url.rstrip('/')}{DECISIONS}/{namespace}/{name}"
    try:
        got = requests.get(target, timeout=timeout)
    except requests.RequestException as exc:
        return None, f"cannot reach the scheduler at {url}: {type(exc).__name__}"
    return _decision_answer(got.status_code, got.text, target)


def _decision_answer(status: int, text: str, where: str) -> tuple[Obj | None, str]:
    try:
        doc = json.loads(text)
    except ValueError:
        return None, f"{where} answered {status} without JSON"
    if status == 200 and isinstance(doc, dict):
        return doc, where
    message = doc.get("error") if isinstance(doc, dict) else None
    return None, f"{where}: {message or f'HTTP {status}'}"


def decision_via_service(
    api: Any, namespace: str, name: str, scheduler_namespace: str = ""
) -> tuple[Obj | None, str]:
    """The record through the API server's proxy to the scheduler's metrics Service (in-cluster use)."""
    path = raw.resource_path("", "v1", "services", scheduler_namespace or None)
    try:
        query = [("labelSelector", SCHEDULER_SERVICE_SELECTOR)]
        services = _items(raw.request_json(api, "GET", path, query=query))
    except errors.ApiError as exc:
        return None, f"cannot list the scheduler's Service: {exc}"
    for svc in services:
        meta = svc.get("metadata") or {}
        ports = (svc.get("spec") or {}).get("ports") or []
        port = next((p.get("name") or p.get("port") for p in ports if p.get("name") == "metrics"), None)
        if port is None and ports:
            port = ports[0].get("port")
        if port is None:
            continue
        proxy = raw.resource_path("", "v1", "services", meta.get("namespace"), f"{meta.get('name')}:{port}")
        where = f"service {meta.get('namespace')}/{meta.get('name')}"
        try:
            doc = raw.request_json(api, "GET", f"{proxy}/proxy{DECISIONS}/{namespace}/{name}")
        except errors.NotFound:
            return None, f"{where}: no decision for {namespace}/{name}"
        except errors.ApiError as exc:
            return None, f"{where}: {exc}"
        if isinstance(doc, dict):
            return doc, where
    return None, f"no Service labelled {SCHEDULER_SERVICE_SELECTOR}"


def _items(doc: Any) -> list[Obj]:
    return list((doc or {}).get("items") or [])
