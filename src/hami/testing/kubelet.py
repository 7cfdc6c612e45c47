"""Kubelet stand-ins for the device plugin.

``FakeKubelet``: the kubelet's side of device-plugin registration, for tests and benchmarks: the
v1beta1 Registration service on ``kubelet.sock`` (requests queued for the test to read) and
DevicePlugin clients on the plugin's socket.

``Kubelet`` (``python -m hami.testing.kubelet --dir DIR --api URL --node NAME``, the demo's): also,
for every pod the scheduler bound to this node that is still ``allocating``, the ``Allocate`` call
the kubelet makes when it starts the pod's containers (device IDs from the plugin's ``ListAndWatch``),
then the status a started pod reports (phase ``Running``, each container's runtime ID). With
``--runtime-dir``, each started container's environment from Allocate is written there as
``<container id>.json`` (``{"env": {...}}``): the OCI spec's env the container toolkit's hook reads,
for the simulated host (``hami.demo.simhost``) to apply.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import sys
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import requests

from hami.core import annotations as ann
from hami.core.codec.quantity import parse_quantity
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.testing.cluster import container_id

RPC_TIMEOUT = 10.0


def registration_handler(sink: queue.Queue[pb.RegisterRequest]) -> grpc.GenericRpcHandler:
    """The kubelet's v1beta1 Registration service: queues each request, rejects other versions."""

    def register(request: pb.RegisterRequest, context: Any) -> pb.Empty:
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}")
        sink.put(request)
        return pb.Empty()

    method = grpc.unary_unary_rpc_method_handler(
        register,
        request_deserializer=pb.RegisterRequest.FromString,
        response_serializer=pb.Empty.SerializeToString,
    )
    return grpc.method_handlers_generic_handler("v1beta1.Registration", {"Register": method})



class DevicePluginClient:
    """The kubelet's side of the v1beta1 DevicePlugin service, over grpcio's plain callables (the
    daemon serves it through generic handlers, so no generated service classes are needed)."""

    def __init__(self, channel: grpc.Channel) -> None:
        def unary(method: str, response: Any) -> grpc.UnaryUnaryMultiCallable:
            return channel.unary_unary(f"{SERVICE}/{method}", request_serializer=_serialize,
                                       response_deserializer=response.FromString)

        self.GetDevicePluginOptions = unary("GetDevicePluginOptions", pb.DevicePluginOptions)
        self.GetPreferredAllocation = unary("GetPreferredAllocation", pb.PreferredAllocationResponse)
        self.Allocate = unary("Allocate", pb.AllocateResponse)
        self.PreStartContainer = unary("PreStartContainer", pb.PreStartContainerResponse)
        self.ListAndWatch = channel.unary_stream(
            f"{SERVICE}/ListAndWatch", request_serializer=_serialize,
            response_deserializer=pb.ListAndWatchResponse.FromString,
        )


SERVICE = "/v1beta1.DevicePlugin"


def _serialize(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data

class FakeKubelet:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.socket = directory / "kubelet.sock"
        self.registrations: queue.Queue[pb.RegisterRequest] = queue.Queue()
        self._server: grpc.Server | None = None

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((registration_handler(self.registrations),))
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0).wait()
            self._server = None

    def restart(self) -> None:
        """As the real kubelet: stop, wipe the sockets directory, serve a new kubelet.sock."""
        self.stop()
        for sock in self.dir.glob("*.sock"):
            sock.unlink()
        self.start()

    def next_registration(self, timeout: float = 30.0) -> pb.RegisterRequest:
        return self.registrations.get(timeout=timeout)

    def plugin(self, endpoint: str) -> tuple[grpc.Channel, DevicePluginClient]:
        """A channel to the plugin's socket ``endpoint`` and a DevicePlugin stub on it."""
        channel = grpc.insecure_channel(f"unix://{self.dir / endpoint}")
        return channel, DevicePluginClient(channel)


def allocating_pods(pods: list[dict[str, Any]], node: str) -> list[dict[str, Any]]:
    """Pods bound to ``node`` whose devices the device plugin has not allocated yet."""
    return [
        p
        for p in pods
        if (p.get("spec") or {}).get("nodeName") == node
        and ((p.get("metadata") or {}).get("annotations") or {}).get(ann.POD_BIND_PHASE)
        == ann.BIND_PHASE_ALLOCATING
    ]


def gpu_requests(pod: dict[str, Any], resource: str) -> list[int]:
    """Devices each container asks for (limits, as kubelet reads extended resources)."""
    out = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        qty = ((c.get("resources") or {}).get("limits") or {}).get(resource)
        out.append(int(parse_quantity(str(qty))) if qty is not None else 0)
    return out


def write_runtime_env(runtime_dir: Path, cid: str, env: dict[str, str]) -> None:
    """Container ``cid``'s environment, as the runtime puts it in the container's OCI spec."""
    runtime_dir.mkdir(parents=True, exist_ok=True)
    path = runtime_dir / f"{cid}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"env": env}), encoding="utf-8")
    os.replace(tmp, path)  # whole, as the runtime writes config.json before the container starts


def runtime_env(runtime_dir: Path, cid: str) -> dict[str, str]:
    """The environment the runtime gave container ``cid`` (``Kubelet``'s file); {} when there is none."""
    try:
        data = json.loads((runtime_dir / f"{cid}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    env = data.get("env") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}


class Kubelet(FakeKubelet):
    def __init__(self, directory: Path, api: str, node: str, runtime_dir: Path | None = None) -> None:
        super().__init__(directory)
        self.api, self.node = api.rstrip("/"), node
        self.runtime_dir = runtime_dir
        # the registered plugin: resource name, channel, stub
        self.connected: tuple[str, grpc.Channel, DevicePluginClient] | None = None
        self.device_ids: list[str] = []
        self._done: set[str] = set()  # pod uids already allocated (the kubelet allocates once per pod)

    def stop(self) -> None:
        if self.connected is not None:
            self.connected[1].close()
        super().stop()

    def _connect(self) -> None:
        try:
            reg = self.registrations.get_nowait()
        except queue.Empty:
            return
        if self.connected is not None:
            self.connected[1].close()
        channel, stub = self.plugin(reg.endpoint)
        stream = stub.ListAndWatch(pb.Empty(), timeout=RPC_TIMEOUT)
        first = next(iter(stream))  # the plugin sends its devices first
        stream.cancel()
        self.device_ids = [d.ID for d in first.devices if d.health == "Healthy"]
        self.connected = (reg.resource_name, channel, stub)
        print(f"kubelet: {reg.resource_name} registered, {len(self.device_ids)} devices", flush=True)

    def tick(self) -> None:
        self._connect()
        if self.connected is None:
            return
        resource, _, stub = self.connected
        r = requests.get(f"{self.api}/api/v1/pods", timeout=RPC_TIMEOUT)
        r.raise_for_status()
        for pod in allocating_pods(r.json().get("items") or [], self.node):
            uid = pod["metadata"]["uid"]
            if uid in self._done:
                continue
            self._done.add(uid)
            ids = iter(self.device_ids)
            wants = gpu_requests(pod, resource)
            reqs = [pb.ContainerAllocateRequest(devices_ids=[next(ids) for _ in range(n)])
                    for n in wants if n > 0]  # fmt: skip
            try:
                reply = stub.Allocate(pb.AllocateRequest(container_requests=reqs), timeout=RPC_TIMEOUT)
                containers = [str(c.get("name", "")) for c in pod["spec"].get("containers") or []]
                gpu_containers = [name for name, n in zip(containers, wants, strict=False) if n > 0]
                for name, response in zip(gpu_containers, reply.container_responses, strict=False):
                    self._started(pod, name, dict(response.envs))
                self._running(pod)
                print(
                    f"kubelet: allocated {pod['metadata']['namespace']}/{pod['metadata']['name']}", flush=True
                )
            except grpc.RpcError as err:
                print(f"kubelet: Allocate for {pod['metadata']['name']} failed: {err.details()}", flush=True)

    def _started(self, pod: dict[str, Any], container: str, env: dict[str, str]) -> None:
        """The runtime creates the container with Allocate's environment (its OCI spec's env)."""
        if self.runtime_dir is None:
            return
        meta = pod["metadata"]
        write_runtime_env(self.runtime_dir, container_id(meta["namespace"], meta["name"], container), env)

    def _running(self, pod: dict[str, Any]) -> None:
        """What the kubelet reports once the containers started: the phase and each container's ID."""
        meta = pod["metadata"]
        statuses = [
            {
                "name": c["name"],
                "containerID": f"containerd://{container_id(meta['namespace'], meta['name'], c['name'])}",
                "image": c.get("image", ""),
                "ready": True,
                "restartCount": 0,
                "state": {"running": {}},
            }
            for c in pod["spec"].get("containers") or []
        ]
        r = requests.patch(
            f"{self.api}/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
            json={"status": {"phase": "Running", "containerStatuses": statuses}},
            headers={"Content-Type": "application/merge-patch+json"},
            timeout=RPC_TIMEOUT,
        )
        r.raise_for_status()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hami.testing.kubelet", description=__doc__)
    p.add_argument("--dir", type=Path, required=True, help="device-plugins directory (holds kubelet.sock)")
    p.add_argument("--api", required=True, help="Kubernetes API URL")
    p.add_argument("--node", required=True)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--runtime-dir", type=Path, default=None, help="where started containers' env is written")
    args = p.parse_args(argv)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    kubelet = Kubelet(args.dir, args.api, args.node, args.runtime_dir)
    kubelet.start()
    print(f"kubelet stand-in serving {args.dir / 'kubelet.sock'}", flush=True)
    while not done.wait(args.interval):
        try:
            kubelet.tick()
        except (requests.RequestException, grpc.RpcError, StopIteration, ValueError) as err:
            print(f"kubelet: {err}", file=sys.stderr, flush=True)
    kubelet.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
