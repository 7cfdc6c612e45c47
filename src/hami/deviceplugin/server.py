"""The kubelet-facing gRPC DevicePlugin service on a unix socket (§C.6, §E).

Section signs (§) refer to docs/design/node-agent.md.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any, Protocol

import grpc

from hami.core import klog
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.deviceplugin.container_setup import AllocateError, PreferredRequest
from hami.deviceplugin.inventory import KubeletDevice

log = klog.get_logger(__name__)

# How often an idle ListAndWatch stream checks that the kubelet is still there.
STREAM_POLL_S = 1.0


class Backend(Protocol):
    """What the servicer needs from the rest of the plugin."""

    def kubelet_devices(self) -> tuple[int, list[KubeletDevice]]: ...

    def wait_health_change(self, seen: int, timeout: float) -> int | None: ...

    def allocate(self, requests: Sequence[Sequence[str]]) -> list[pb.ContainerAllocateResponse]: ...

    def preferred(self, requests: Sequence[PreferredRequest]) -> list[list[str] | None]: ...


def to_pb_devices(devices: Sequence[KubeletDevice]) -> list[pb.Device]:
    out = []
    for dev in devices:
        msg = pb.Device(ID=dev.id, health=dev.health)
        if dev.numa is not None:
            msg.topology.nodes.append(pb.NUMANode(ID=dev.numa))
        out.append(msg)
    return out


SERVICE = "v1beta1.DevicePlugin"
REGISTER_METHOD = "/v1beta1.Registration/Register"


class DevicePluginServicer:
    def __init__(self, backend: Backend, resource: str) -> None:
        self._backend = backend
        self._resource = resource
        # One Allocate at a time, as HAMi's global mutex: each pops from the same pod annotation.
        self._allocate_lock = threading.Lock()

    def GetDevicePluginOptions(self, request: pb.Empty, context: Any) -> pb.DevicePluginOptions:
        # HAMi answers true here whatever Register said; the kubelet uses Register's options.
        return pb.DevicePluginOptions(get_preferred_allocation_available=True)

    def ListAndWatch(self, request: pb.Empty, context: Any) -> Iterator[pb.ListAndWatchResponse]:
        seen, devices = self._backend.kubelet_devices()
        unhealthy = {d.id for d in devices if d.health != "Healthy"}
        yield pb.ListAndWatchResponse(devices=to_pb_devices(devices))
        while context.is_active():
            gen = self._backend.wait_health_change(seen, STREAM_POLL_S)
            if gen is None:
                return
            if gen != seen:
                seen, devices = self._backend.kubelet_devices()
                now = {d.id for d in devices if d.health != "Healthy"}
                for device_id in sorted(now - unhealthy):
                    log.info("'%s' device marked unhealthy: %s", self._resource, device_id)
                unhealthy = now
                yield pb.ListAndWatchResponse(devices=to_pb_devices(devices))

    def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: Any
    ) -> pb.PreferredAllocationResponse:
        reqs = [
            PreferredRequest(tuple(r.available_deviceIDs), tuple(r.must_include_deviceIDs), r.allocation_size)
            for r in request.container_requests
        ]
        resp = pb.PreferredAllocationResponse()
        for chosen in self._backend.preferred(reqs):
            if chosen is not None:
                resp.container_responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return resp

    def Allocate(self, request: pb.AllocateRequest, context: Any) -> pb.AllocateResponse:
        with self._allocate_lock:
            try:
                responses = self._backend.allocate([list(r.devices_ids) for r in request.container_requests])
            except AllocateError as err:
                context.abort(grpc.StatusCode.UNKNOWN, err.message)
                raise  # abort() raises; this line is never reached
        return pb.AllocateResponse(container_responses=responses)

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: Any
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()

    def handler(self) -> grpc.GenericRpcHandler:
        """The service under its v1beta1 method names (the generated stubs are for the kubelet side)."""

        def unary(fn: Any, req: Any, resp: Any) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString
            )

        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "GetDevicePluginOptions": unary(
                    self.GetDevicePluginOptions, pb.Empty, pb.DevicePluginOptions
                ),
                "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                    self.ListAndWatch,
                    request_deserializer=pb.Empty.FromString,
                    response_serializer=pb.ListAndWatchResponse.SerializeToString,
                ),
                "GetPreferredAllocation": unary(
                    self.GetPreferredAllocation, pb.PreferredAllocationRequest, pb.PreferredAllocationResponse
                ),
                "Allocate": unary(self.Allocate, pb.AllocateRequest, pb.AllocateResponse),
                "PreStartContainer": unary(
                    self.PreStartContainer, pb.PreStartContainerRequest, pb.PreStartContainerResponse
                ),
            },
        )


class PluginServer:
    """Serves the DevicePlugin service on ``<socket_dir>/<socket_name>`` and confirms it answers."""

    def __init__(self, backend: Backend, resource: str, socket_path: Path, workers: int = 16) -> None:
        self.resource = resource
        self.socket_path = socket_path
        self._backend = backend
        self._workers = workers
        self._server: grpc.Server | None = None

    def start(self, dial_timeout: float = 5.0) -> None:
        log.info("Starting GRPC server for '%s'", self.resource)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)  # the kubelet makes it; a demo may not
        if self.socket_path.exists() or self.socket_path.is_symlink():
            os.unlink(self.socket_path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._workers))
        server.add_generic_rpc_handlers((DevicePluginServicer(self._backend, self.resource).handler(),))
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        log.info("Starting to serve '%s' on %s", self.resource, self.socket_path)
        with grpc.insecure_channel(f"unix://{self.socket_path}") as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=dial_timeout)
            except grpc.FutureTimeoutError:
                self.stop()
                raise RuntimeError(f"device plugin socket {self.socket_path} did not answer") from None

    def stop(self, grace: float = 1.0) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace).wait()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)


def register_with_kubelet(
    kubelet_socket: Path,
    endpoint: str,
    resource: str,
    preferred_allocation: bool,
    timeout: float = 5.0,
) -> None:
    """``Register`` on kubelet.sock; raises ``grpc.RpcError`` or ``RuntimeError`` on failure."""
    with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise RuntimeError(f"cannot reach kubelet at {kubelet_socket}") from None
        register = channel.unary_unary(
            REGISTER_METHOD,
            request_serializer=pb.RegisterRequest.SerializeToString,
            response_deserializer=pb.Empty.FromString,
        )
        register(
            pb.RegisterRequest(
                version="v1beta1",
                endpoint=endpoint,
                resource_name=resource,
                options=pb.DevicePluginOptions(
                    pre_start_required=False,
                    get_preferred_allocation_available=preferred_allocation,
                ),
            ),
            timeout=timeout,
        )
    log.info("Registered device plugin for '%s' with Kubelet", resource)


class SocketWatcher:
    """Calls ``on_created`` when ``kubelet.sock`` is (re)created, i.e. the kubelet restarted.

    Polls the socket's identity (inode, ctime): portable, and a kubelet restart is rare enough that a
    sub-second delay does not matter.
    """

    def __init__(self, path: Path, on_created: Callable[[], None], interval: float = 0.5) -> None:
        self._path = path
        self._on_created = on_created
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelet-socket-watch", daemon=True)

    def _identity(self) -> tuple[int, int] | None:
        try:
            st = self._path.stat()
        except OSError:
            return None
        return st.st_ino, st.st_ctime_ns

    def start(self) -> None:
        self._last = self._identity()
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            now = self._identity()
            if now is not None and now != self._last:
                log.info("inotify: %s created, restarting.", self._path)
                self._last = now
                try:
                    self._on_created()
                except Exception:
                    log.error("restart after kubelet socket creation failed", exc_info=True)
            elif now is None:
                self._last = None

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
