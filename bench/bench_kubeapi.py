"""The Kubernetes API emulator alone: its CPU per request, by verb, with and without watchers.

Run: PYTHONPATH=src python bench/bench_kubeapi.py [--requests 2000] [--nodes 1000]
     [--watchers 0,2] [--history 20000]

The emulator (``python -m hami.testing.kubeapi``) runs as a child process, seeded over HTTP with
``--nodes`` GPU nodes (so that the watch history and the store have the size the extender
benchmark gives them). For each watcher count, that many watches on all pods are opened; then
each kind of request is sent ``--requests`` times over one keep-alive connection, as the
extender's and kube-scheduler's hot paths send them:

- GET a pod;
- PATCH a pod (merge patch of one annotation with a resourceVersion precondition, as the
  extender's pod and node-lock patches do);
- POST pods/NAME/binding (each to a fresh pod, created beforehand and not counted);
- POST a core/v1 Event (a kind nobody watches here: the watchers only wake up).

Figure: the emulator process's CPU (user + system, /proc/<pid>/stat) per request, counted once
every watcher has received every event the requests caused, so the fan-out is included.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.jsonhttp import Conn
from hami.testing.kubeapi import SERVING
from hami.testing.processes import ProcessGroup, cpu_seconds
from hami.testing.wait import wait_until

MERGE = "application/merge-patch+json"


class Watcher:
    """A watch on all pods, read by a thread that counts the event lines."""

    def __init__(self, api_url: str, rv: str) -> None:
        self.conn = Conn(api_url).conn
        self.conn.request("GET", f"/api/v1/pods?watch=true&resourceVersion={rv}")
        self.reply = self.conn.getresponse()
        self.events = 0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while self.reply.readline():
                self.events += 1
        except (OSError, ValueError, http.client.HTTPException):
            return  # closed by close()

    def close(self) -> None:
        if self.conn.sock is not None:  # wakes the reader (closing first would wait for its lock)
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(10)
        self.conn.close()


def measure(pid: int, watchers: list[Watcher], expected_events: int, send: Callable[[], None]) -> float:
    """CPU seconds the emulator spent on `send()` and on delivering its watch events."""
    start = [w.events for w in watchers]
    cpu0 = cpu_seconds(pid)
    send()
    for w, n in zip(watchers, start, strict=True):
        wait_until(lambda w=w, n=n: w.events >= n + expected_events, timeout=120, what="watch events")
    return cpu_seconds(pid) - cpu0


def run(api_url: str, pid: int, n: int, watchers: int, round_no: int) -> dict[str, float]:
    conn = Conn(api_url)
    pod = conn.call("POST", "/api/v1/namespaces/default/pods",
                    json.dumps(gpu_pod(f"bench-{round_no}", mem=2048, cores=10)).encode())
    name = pod["metadata"]["name"]
    fresh = [
        conn.call("POST", "/api/v1/namespaces/default/pods",
                  json.dumps(gpu_pod(f"bind-{round_no}-{i}", mem=2048, cores=10)).encode())
        for i in range(n)
    ]
    rv = conn.call("GET", "/api/v1/namespaces/default/pods?limit=1", b"")["metadata"]["resourceVersion"]
    open_watches = [Watcher(api_url, rv) for _ in range(watchers)]
    path = f"/api/v1/namespaces/default/pods/{name}"
    state = {"rv": pod["metadata"]["resourceVersion"]}

    def get() -> None:
        for _ in range(n):
            conn.call("GET", path, b"")

    def patch() -> None:
        for i in range(n):
            body = {"metadata": {"resourceVersion": state["rv"], "annotations": {"bench/seq": str(i)}}}
            reply = conn.call("PATCH", path, json.dumps(body).encode(), MERGE)
            state["rv"] = reply["metadata"]["resourceVersion"]

    def bind() -> None:
        for p in fresh:
            meta = p["metadata"]
            body = {"apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": meta["name"], "namespace": "default", "uid": meta["uid"]},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": "node-0000"}}
            binding = f"/api/v1/namespaces/default/pods/{meta['name']}/binding"
            conn.call("POST", binding, json.dumps(body).encode())

    def event() -> None:
        for i in range(n):
            body = {"apiVersion": "v1", "kind": "Event",
                    "metadata": {"name": f"{name}.{i:x}", "namespace": "default"},
                    "involvedObject": {"kind": "Pod", "name": name, "namespace": "default"},
                    "reason": "BindingSucceeded", "message": f"bench event {i}", "type": "Normal",
                    "source": {"component": "hami-scheduler"}, "count": 1}
            conn.call("POST", "/api/v1/namespaces/default/events", json.dumps(body).encode())

    try:
        return {
            "GET": measure(pid, open_watches, 0, get) / n,
            "PATCH": measure(pid, open_watches, n, patch) / n,
            "POST binding": measure(pid, open_watches, n, bind) / n,
            "POST event": measure(pid, open_watches, 0, event) / n,
        }
    finally:
        for w in open_watches:
            w.close()
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000, help="requests per verb and round")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--watchers", default="0,2", help="watcher counts, comma-separated")
    parser.add_argument("--history", type=int, default=20000)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-kubeapi-") as tmp:
        children = ProcessGroup(Path(tmp))
        try:
            emulator = children.python(
                "kubeapi", "hami.testing.kubeapi", ["--port=0", f"--history={args.history}"]
            )
            api_url = children.wait_for_log(emulator, SERVING, 120, "the API emulator").group(1)
            conn = Conn(api_url)
            for i in range(args.nodes):
                node = gpu_node(f"node-{i:04d}", gpus=8, mem=15360)
                conn.call("POST", "/api/v1/nodes", json.dumps(node).encode())
            conn.close()
            print(f"emulator seeded with {args.nodes} nodes; {args.requests} requests per verb, "
                  "CPU per request (user + system):")
            for round_no, count in enumerate(int(w) for w in args.watchers.split(",")):
                started = time.monotonic()
                per = run(api_url, emulator.proc.pid, args.requests, count, round_no)
                figures = ", ".join(f"{verb} {s * 1e6:.0f} us" for verb, s in per.items())
                print(f"  {count} watchers: {figures} ({time.monotonic() - started:.1f}s)")
        finally:
            children.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
