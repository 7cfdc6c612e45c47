"""A kube-state-metrics stand-in for the demo and the integration tests.

The ``HAMiGPUPodPending`` of docs/guides/tuning.md §5.4 and the per-pool over-commit rule read
kube-state-metrics series; this serves the four they use, with kube-state-metrics' names and labels, from the
pods and nodes of an API server listed at scrape time: ``kube_pod_status_phase``,
``kube_pod_container_resource_requests``, ``kube_node_labels`` and ``kube_node_status_allocatable`` (the node
GPU headroom rule).

``python -m hami.demo.ksm --api URL --bind :PORT``
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import requests
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from hami.core.codec.quantity import parse_quantity
from hami.core.serve import serve_metrics

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
Lister = Callable[[str], list[dict[str, Any]]]


def sanitize(name: str) -> str:
    """kube-state-metrics' label/resource name mangling: every non-alphanumeric becomes ``_``."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _unit(resource: str) -> str:
    if resource == "cpu":
        return "core"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return "byte"
    return "integer"


def pod_families(pods: list[dict[str, Any]]) -> Iterator[GaugeMetricFamily]:
    phase = GaugeMetricFamily(
        "kube_pod_status_phase", "The pods current phase.", labels=["namespace", "pod", "uid", "phase"]
    )
    req = GaugeMetricFamily(
        "kube_pod_container_resource_requests",
        "The number of requested request resource by a container.",
        labels=["namespace", "pod", "uid", "container", "node", "resource", "unit"],
    )
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        ns, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")
        current = (pod.get("status") or {}).get("phase", "Unknown")
        for p in PHASES:
            phase.add_metric([ns, name, uid, p], 1.0 if p == current else 0.0)
        for c in spec.get("containers") or []:
            resources = c.get("resources") or {}
            # Kubernetes defaults requests to limits for extended resources
            wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for resource, qty in wanted.items():
                labels = [
                    ns,
                    name,
                    uid,
                    c.get("name", ""),
                    spec.get("nodeName", ""),
                    sanitize(resource),
                    _unit(resource),
                ]
                req.add_metric(labels, float(parse_quantity(str(qty))))
    yield phase
    yield req


def node_families(nodes: list[dict[str, Any]]) -> Iterator[GaugeMetricFamily]:
    keys = sorted({sanitize(k) for n in nodes for k in ((n.get("metadata") or {}).get("labels") or {})})
    fam = GaugeMetricFamily("kube_node_labels", "Kubernetes labels converted to Prometheus labels.",
                            labels=["node", *(f"label_{k}" for k in keys)])  # fmt: skip
    allocatable = GaugeMetricFamily(
        "kube_node_status_allocatable",
        "The allocatable for different resources of a node that are available for scheduling.",
        labels=["node", "resource", "unit"],
    )
    for n in nodes:
        meta = n.get("metadata") or {}
        labels = {sanitize(k): v for k, v in (meta.get("labels") or {}).items()}
        fam.add_metric([meta.get("name", ""), *(labels.get(k, "") for k in keys)], 1.0)
        for resource, qty in ((n.get("status") or {}).get("allocatable") or {}).items():
            allocatable.add_metric(
                [meta.get("name", ""), sanitize(resource), _unit(resource)], float(parse_quantity(str(qty)))
            )
    yield fam
    yield allocatable


class StateCollector(Collector):
    def __init__(self, lister: Lister) -> None:
        self._list = lister

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from pod_families(self._list("/api/v1/pods"))
        yield from node_families(self._list("/api/v1/nodes"))


def http_lister(api_url: str, timeout: float = 5.0) -> Lister:
    def list_items(path: str) -> list[dict[str, Any]]:
        r = requests.get(api_url + path, timeout=timeout)
        r.raise_for_status()
        items: list[dict[str, Any]] = r.json().get("items") or []
        return items

    return list_items


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hami.demo.ksm", description=__doc__)
    p.add_argument("--api", required=True, help="API server URL, e.g. http://127.0.0.1:6443")
    p.add_argument("--bind", default=":8080")
    args = p.parse_args(argv)
    registry = CollectorRegistry()
    registry.register(StateCollector(http_lister(args.api.rstrip("/"))))
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    server = serve_metrics(args.bind, registry, name="kube-state-metrics")
    print(f"kube-state-metrics stand-in serving on {server.url}", flush=True)
    done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
