"""The kubelet-facing gRPC DevicePlugin service on a unix socket (§C.6, §E).

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
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

# How long a dial of our own socket may take before the server counts as dead (HAMi's self-dial).
DIAL_TIMEOUT_S = 5.0
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
        self._log_devices(devices)
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
                for device_id in sorted(unhealthy - now):
                    log.info("'%s' device marked healthy: %s", self._resource, device_id)
                unhealthy = now
                self._log_devices(devices)
                yield pb.ListAndWatchResponse(devices=to_pb_devices(devices))

    def _log_devices(self, devices: Sequence[KubeletDevice]) -> None:
        log.v(4).info("ListAndWatch: sending %d device(s) of '%s'", len(devices), self._resource)
        if log.v(5):
            for dev in devices:
                numa = "" if dev.numa is None else f", NUMA node {dev.numa}"
                log.v(5).info("ListAndWatch: device %s %s%s", dev.id, dev.health, numa)

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


class CrashBudget:
    """HAMi's give-up rule for a crashing gRPC server (``plugin/server.go`` ``Serve``).

    Each crash within an hour of the previous one counts; one more crash once the count is past
    ``LIMIT`` (the seventh in a row) means giving up; a crash more than an hour after the previous
    one starts the count again. HAMi tests the count before the time, so after six quick crashes
    even one a day later quits; here an hour of quiet is looked at first.
    """

    LIMIT = 5
    WINDOW_S = 3600.0

    def __init__(self, now: float) -> None:
        self.count = 0
        self._last = now

    def crashed(self, now: float) -> bool:
        """Record a crash at ``now``; True when the server should not be restarted again."""
        quiet = now - self._last > self.WINDOW_S
        self._last = now
        if quiet:
            self.count = 0
            return False
        if self.count > self.LIMIT:
            return True
        self.count += 1
        return False


def restart_delay(count: int, base: float, cap: float = 30.0) -> float:
    """Back-off before restart number ``count`` (1, 2, ...): ``base`` doubling up to ``cap``.
    HAMi restarts at once; a server that dies on start would then spin."""
    return float(min(base * 2 ** max(count - 1, 0), cap))


class PluginServer:
    """Serves the DevicePlugin service on ``<socket_dir>/<socket_name>`` and confirms it answers.

    A supervisor thread checks every ``probe_s`` that the server still runs and that its socket is
    there and answers; when not, the server crashed: it is served again after a back-off and
    ``on_restart`` runs (the plugin registers again, since the kubelet dropped its stream), until
    ``CrashBudget`` says to give up and ``on_give_up`` gets HAMi's message.
    """

    def __init__(
        self,
        backend: Backend,
        resource: str,
        socket_path: Path,
        workers: int = 16,
        *,
        on_restart: Callable[[], None] = lambda: None,
        on_crash: Callable[[], None] = lambda: None,
        on_give_up: Callable[[str], None] = lambda message: log.error("plugin fatal: %s", message),
        probe_s: float = 5.0,
        backoff_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.resource = resource
        self.socket_path = socket_path
        self._backend = backend
        self._workers = workers
        self._on_restart = on_restart
        self._on_crash = on_crash
        self._on_give_up = on_give_up
        self._probe_s = probe_s
        self._backoff_s = backoff_s
        self._clock = clock
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None

    def start(self, dial_timeout: float = DIAL_TIMEOUT_S) -> None:
        self._stopping.clear()
        self._serve(dial_timeout)
        self._supervisor = threading.Thread(target=self._supervise, name="grpc-supervisor", daemon=True)
        self._supervisor.start()

    def _serve(self, dial_timeout: float = DIAL_TIMEOUT_S) -> None:
        log.info("Starting GRPC server for '%s'", self.resource)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)  # the kubelet makes it; a demo may not
        if self.socket_path.exists() or self.socket_path.is_symlink():
            os.unlink(self.socket_path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._workers))
        server.add_generic_rpc_handlers((DevicePluginServicer(self._backend, self.resource).handler(),))
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        with self._lock:
            self._server = server
        log.info("Starting to serve '%s' on %s", self.resource, self.socket_path)
        if not self._answers(dial_timeout):
            self._halt(server)
            raise RuntimeError(f"device plugin socket {self.socket_path} did not answer")

    def _answers(self, timeout: float) -> bool:
        with grpc.insecure_channel(f"unix://{self.socket_path}") as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=timeout)
            except grpc.FutureTimeoutError:
                return False
        return True

    def _problem(self) -> str | None:
        """Why the server no longer serves the kubelet, or None while it does."""
        with self._lock:
            server = self._server
        if server is None or not server.wait_for_termination(0):  # False: it has terminated
            return "the server terminated"
        if not self.socket_path.is_socket():
            return f"socket {self.socket_path} is gone"
        if not self._answers(DIAL_TIMEOUT_S):
            return f"socket {self.socket_path} does not answer"
        return None

    def _supervise(self) -> None:
        budget = CrashBudget(self._clock())
        while not self._stopping.wait(self._probe_s):
            problem = self._problem()
            if problem is None or self._stopping.is_set():
                continue
            log.info("GRPC server for '%s' crashed with error: %s", self.resource, problem)
            self._on_crash()
            if budget.crashed(self._clock()):
                message = f"GRPC server for '{self.resource}' has repeatedly crashed recently. Quitting"
                self._on_give_up(message)
                return
            delay = restart_delay(budget.count, self._backoff_s)
            log.v(4).info("restarting GRPC server for '%s' in %.1fs", self.resource, delay)
            if self._stopping.wait(delay):
                return
            with self._lock:
                old, self._server = self._server, None
            if old is not None:
                self._halt(old)
            try:
                self._serve()
                self._on_restart()
            except Exception as exc:  # the next probe counts it as one more crash
                log.error("restarting GRPC server for '%s' failed: %s", self.resource, exc)

    @staticmethod
    def _halt(server: grpc.Server, grace: float = 1.0) -> None:
        server.stop(grace).wait()

    def stop(self, grace: float = 1.0) -> None:
        self._stopping.set()
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None and supervisor is not threading.current_thread():
            supervisor.join()
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            self._halt(server, grace)
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
