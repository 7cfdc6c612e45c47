"""The HTTP front alone: server CPU per request, Hypercorn against uvicorn's httptools protocol
(and granian's Rust server, when installed).

Run: PYTHONPATH=src python bench/bench_serving.py [--requests 3000] [--body 13000] [--rounds 2]

Each server runs in a child process with ``hami.core.serve``'s guard (body limit and deadline,
direct routes, the handler on worker threads, the response written from the loop) around a
trivial direct route, as the extender's /filter and /bind are served; and again with a bare ASGI
app that reads the body and answers on the loop (no guard, no worker), the server's own floor.
The client (this process) sends ``--requests`` POSTs of ``--body`` bytes over one keep-alive
connection, the shape of kube-scheduler's calls. Figure: the server process's CPU (user + system)
per request; the four alternate ``--rounds`` times and the ratios are taken within each round.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from importlib.util import find_spec
from typing import Any

from hami.testing.processes import cpu_seconds

TARGET_RATIO = 2.5  # what makes a change of server worth it (docs/design/serving.md)


KINDS = ("hypercorn", "uvicorn", "hypercorn-bare", "uvicorn-bare")
# granian (PyPI, a Rust HTTP server): measured when installed; it binds its own sockets, so our
# listener's connection limit is not in front of it (the guard's body limit and deadline are).
GRANIAN = ("granian", "granian-bare")


async def _bare(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The least an ASGI app can do with a POST: read it, answer from the loop."""
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"{}"})


def _serve(kind: str) -> None:
    """Child: serve a trivial direct route on a free port, print the port, run until stdin closes."""
    from hypercorn.asyncio.run import worker_serve
    from hypercorn.config import Config, Sockets
    from hypercorn.utils import wrap_app

    from hami.core.serve import serve_wsgi
    from hami.core.serve.guard import Guard, Workers
    from hami.core.serve.listener import ConnectionLimit, listen

    def app(_environ: object, start_response: object) -> list[bytes]:
        raise AssertionError("only the direct route is benchmarked")

    def handler(body: bytes) -> tuple[int, str, bytes]:
        return 200, "application/json", b'{"ok":true,"size":%d}' % len(body)

    if kind == "hypercorn":  # as every daemon serves
        print(serve_wsgi("127.0.0.1:0", app, name="bench", direct={"/filter": handler}).port, flush=True)
        sys.stdin.read()
        return
    if kind.startswith("granian"):
        from granian.constants import Interfaces
        from granian.server.embed import Server

        from hami.testing.processes import free_port

        target = _bare if kind == "granian-bare" else Guard(
            app, 1 << 20, Workers(8, "bench"), {"/filter": handler})  # type: ignore[arg-type]
        port = free_port()
        front = Server(target, port=port, interface=Interfaces.ASGI, log_enabled=False)
        threading.Thread(target=lambda: asyncio.run(front.serve()), daemon=True).start()
        print(port, flush=True)
        sys.stdin.read()
        os._exit(0)  # its Rust threads panic when the interpreter finalizes under them
    sock = listen("127.0.0.1", 0, ConnectionLimit(64), 64)
    if kind == "hypercorn-bare":
        config = Config()
        config.errorlog = config.accesslog = None
        serving = worker_serve(wrap_app(_bare, 1 << 20, "asgi"), config,  # type: ignore[arg-type]
                               sockets=Sockets([], [sock], []), shutdown_trigger=lambda: asyncio.sleep(1e9))
        threading.Thread(target=lambda: asyncio.run(serving), daemon=True).start()
    else:
        import uvicorn

        asgi = _bare if kind == "uvicorn-bare" else Guard(
            app, 1 << 20, Workers(8, "bench"), {"/filter": handler})  # type: ignore[arg-type]
        uconfig = uvicorn.Config(asgi, http="httptools", loop="asyncio", lifespan="off",
                                 access_log=False, log_level="warning")
        server = uvicorn.Server(uconfig)
        threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True).start()
    print(sock.getsockname()[1], flush=True)
    sys.stdin.read()


def _round(kind: str, requests: int, body: bytes) -> float:
    child = subprocess.Popen([sys.executable, __file__, "--serve", kind], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for _ in range(100):  # granian binds once its loop runs
            try:
                conn.connect()
                break
            except ConnectionRefusedError:
                time.sleep(0.05)
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        headers = {"Content-Type": "application/json"}
        for _ in range(200):  # warm-up: imports, first allocations
            conn.request("POST", "/filter", body, headers)
            conn.getresponse().read()
        before = cpu_seconds(child.pid)
        for _ in range(requests):
            conn.request("POST", "/filter", body, headers)
            reply = conn.getresponse()
            if reply.status != 200:
                raise RuntimeError(f"{kind}: status {reply.status}")
            reply.read()
        spent = cpu_seconds(child.pid) - before
        conn.close()
        return spent / requests * 1e3
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--body", type=int, default=13000, help="POST body bytes")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--serve", choices=KINDS + GRANIAN, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve)
        return
    body = b'{"names":[' + b",".join(b'"node-%06d"' % i for i in range(args.body // 14)) + b"]}"
    print(f"{args.requests} POSTs of {len(body)} bytes over one keep-alive connection, trivial direct route")
    kinds = KINDS + (GRANIAN if find_spec("granian") else ())
    if not find_spec("granian"):
        print("granian is not installed (pip install granian): measuring Hypercorn and uvicorn only")
    for n in range(1, args.rounds + 1):
        ms = {kind: _round(kind, args.requests, body) for kind in kinds}
        print(f"round {n}: server CPU ms per request: " + ", ".join(f"{k} {v:.3f}" for k, v in ms.items()))
        guarded = ms["hypercorn"] / ms["uvicorn"]
        bare = ms["hypercorn-bare"] / ms["uvicorn-bare"]
        print(f"  with the guard: hypercorn / uvicorn+httptools = {guarded:.2f}x (worth a change at >= "
              f"{TARGET_RATIO}x); bare: {bare:.2f}x; the guard on uvicorn: "
              f"+{ms['uvicorn'] - ms['uvicorn-bare']:.3f} ms")
        if "granian" in ms:
            print(f"  with the guard: hypercorn / granian = {ms['hypercorn'] / ms['granian']:.2f}x; bare: "
                  f"{ms['hypercorn-bare'] / ms['granian-bare']:.2f}x; the guard on granian: "
                  f"+{ms['granian'] - ms['granian-bare']:.3f} ms")


if __name__ == "__main__":
    main()
