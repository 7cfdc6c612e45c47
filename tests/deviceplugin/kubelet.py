"""A kubelet stand-in: the Registration service on kubelet.sock and a DevicePlugin client, from our proto."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any, TypeVar

import grpc

from hami.deviceplugin.api import deviceplugin_pb2 as pb
from tests.deviceplugin.kubelet_api import deviceplugin_pb2_grpc as pb_grpc

T = TypeVar("T")


class _Registration(pb_grpc.RegistrationServicer):  # type: ignore[misc]
    def __init__(self, sink: queue.Queue[pb.RegisterRequest]) -> None:
        self._sink = sink

    def Register(self, request: pb.RegisterRequest, context: Any) -> pb.Empty:
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}")
        self._sink.put(request)
        return pb.Empty()


class FakeKubelet:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.socket = directory / "kubelet.sock"
        self.registrations: queue.Queue[pb.RegisterRequest] = queue.Queue()
        self._server: grpc.Server | None = None

    def start(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(_Registration(self.registrations), server)
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

    def plugin(self, endpoint: str) -> tuple[grpc.Channel, pb_grpc.DevicePluginStub]:
        channel = grpc.insecure_channel(f"unix://{self.dir / endpoint}")
        return channel, pb_grpc.DevicePluginStub(channel)


def wait_for(check: Callable[[], T | None], timeout: float = 30.0, what: str = "condition") -> T:
    """Polls ``check`` until it returns something truthy; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
