"""A kube-scheduler stand-in: it calls the HAMi scheduler extender as kube-scheduler would.

Every ``--interval`` seconds, for each Pending, unbound pod whose ``spec.schedulerName`` is HAMi's, it
POSTs ExtenderArgs (the pod and every node name) to ``/filter`` and, when a node passes, an
ExtenderBindingArgs to ``/bind`` on the first one. It also creates a short batch pod every
``--churn-every`` seconds and deletes it after ``--lifetime`` seconds, so that filters, binds, node
locks and allocations keep happening in the demo. A pod no node fits is retried after 1 s, then 2, 4, 8
and every 10 s, as kube-scheduler backs off unschedulable pods (podInitialBackoffDuration 1 s,
podMaxBackoffDuration 10 s): each attempt is a filter and a few Events the extender writes under its
client rate limit, and retrying every pending pod at every pass outran that limit.

With ``--admit``, a batch pod is first passed through the extender's ``/webhook``, as the API server
applies the chart's MutatingWebhookConfiguration (``admitted``): with tracing on, its trace then
starts at the webhook (docs/design/tracing.md).

``python -m hami.demo.kubesched --api URL --extender URL``
"""

from __future__ import annotations

import argparse
import base64
import json
import signal
import sys
import threading
import time
from collections import deque
from typing import Any

import requests

from hami.testing import cluster
from hami.testing.kubeapi.patch import json_patch

TIMEOUT = 10.0
BACKOFF_INITIAL_S, BACKOFF_MAX_S = 1.0, 10.0


def pending_pods(pods: list[dict[str, Any]], scheduler_name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in pods
        if (p.get("spec") or {}).get("schedulerName") == scheduler_name
        and not (p.get("spec") or {}).get("nodeName")
        and (p.get("status") or {}).get("phase", "Pending") == "Pending"
    ]


def batch_pod(n: int) -> dict[str, Any]:
    pod = cluster.pending_pod()
    pod["metadata"] = {"name": f"batch-job-{n}", "namespace": "ml-batch", "labels": {"app": "batch-job"}}
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2048"}
    return pod


def admitted(session: requests.Session, extender: str, pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` as the API server creates it after the extender's mutating webhook; ValueError with
    the webhook's message when it refuses the pod."""
    namespace = pod["metadata"].get("namespace", "default")
    review = {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "kubesched", "namespace": namespace, "operation": "CREATE", "object": pod},
    }
    r = session.post(extender.rstrip("/") + "/webhook", json=review, timeout=TIMEOUT)
    r.raise_for_status()
    response = r.json()["response"]
    if not response["allowed"]:
        raise ValueError(f"webhook refused {namespace}/{pod['metadata'].get('name')}: "
                         f"{response['status'].get('message', '')}")
    if not response.get("patch"):
        return pod
    mutated: dict[str, Any] = json_patch(pod, json.loads(base64.b64decode(response["patch"])))
    return mutated


class Driver:
    def __init__(self, api: str, extender: str, scheduler_name: str, admit: bool = False) -> None:
        self.api, self.extender, self.scheduler_name = api.rstrip("/"), extender.rstrip("/"), scheduler_name
        self.admit = admit
        self.session = requests.Session()
        self.filters = self.binds = 0
        self.backoff: dict[str, tuple[float, float]] = {}  # pod uid -> (last delay, next attempt)

    def _items(self, path: str) -> list[dict[str, Any]]:
        r = self.session.get(self.api + path, timeout=TIMEOUT)
        r.raise_for_status()
        items: list[dict[str, Any]] = r.json().get("items") or []
        return items

    def schedule_once(self) -> None:
        if not self.extender:  # the real kube-scheduler schedules (stackkube.py)
            return
        now = time.monotonic()
        nodes = [n["metadata"]["name"] for n in self._items("/api/v1/nodes")]
        pending = pending_pods(self._items("/api/v1/pods"), self.scheduler_name)
        uids = {str(p["metadata"].get("uid", "")) for p in pending}
        self.backoff = {uid: b for uid, b in self.backoff.items() if uid in uids}
        for pod in pending:
            uid = str(pod["metadata"].get("uid", ""))
            delay, not_before = self.backoff.get(uid, (0.0, 0.0))
            if now < not_before:
                continue
            r = self.session.post(
                self.extender + "/filter", json={"Pod": pod, "NodeNames": nodes}, timeout=TIMEOUT
            )
            self.filters += 1
            fitting = (r.json() or {}).get("NodeNames") or [] if r.status_code == 200 else []
            if not fitting:
                delay = min(max(delay * 2, BACKOFF_INITIAL_S), BACKOFF_MAX_S)
                self.backoff[uid] = (delay, now + delay)
                continue
            meta = pod["metadata"]
            args = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"],
                    "Node": fitting[0]}  # fmt: skip
            self.session.post(self.extender + "/bind", json=args, timeout=TIMEOUT)
            self.binds += 1

    def create(self, pod: dict[str, Any]) -> None:
        if self.admit:
            pod = admitted(self.session, self.extender, pod)
        ns = pod["metadata"]["namespace"]
        self.session.post(
            f"{self.api}/api/v1/namespaces/{ns}/pods", json=pod, timeout=TIMEOUT
        ).raise_for_status()

    def delete(self, namespace: str, name: str) -> None:
        self.session.delete(f"{self.api}/api/v1/namespaces/{namespace}/pods/{name}", timeout=TIMEOUT)


def run(driver: Driver, done: threading.Event, interval: float, churn_every: float, lifetime: float) -> None:
    alive: deque[tuple[float, str]] = deque()  # (deadline, name) of batch pods
    now = next_churn = 0.0
    n = 0
    while not done.wait(interval):
        now += interval
        try:
            if churn_every > 0 and now >= next_churn:
                driver.create(batch_pod(n))
                alive.append((now + lifetime, f"batch-job-{n}"))
                n, next_churn = n + 1, now + churn_every
            while alive and alive[0][0] <= now:
                driver.delete("ml-batch", alive.popleft()[1])
            driver.schedule_once()
        except (requests.RequestException, ValueError) as err:
            print(f"kubesched: {err}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hami.demo.kubesched", description=__doc__)
    p.add_argument("--api", required=True, help="Kubernetes API URL")
    p.add_argument("--extender", default="", help="scheduler extender URL; empty: create batch pods only")
    p.add_argument("--scheduler-name", default=cluster.SCHEDULER_NAME)
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--churn-every", type=float, default=20.0, help="0: create no batch pods")
    p.add_argument("--lifetime", type=float, default=60.0, help="seconds a batch pod lives")
    p.add_argument("--admit", action="store_true", help="batch pods go through the extender's /webhook")
    args = p.parse_args(argv)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    driver = Driver(args.api, args.extender, args.scheduler_name, args.admit)
    print(f"kubesched: driving {args.extender} for pods of {args.scheduler_name}", flush=True)
    run(driver, done, args.interval, args.churn_every, args.lifetime)
    return 0


if __name__ == "__main__":
    sys.exit(main())
