"""The gRPC layer against a kubelet-side client built from the same proto (real unix sockets)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc
import pytest

from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.container_setup import DEVICE_NUMBER_MISMATCH, AllocateError, PreferredRequest
from hami.deviceplugin.health import HealthState
from hami.deviceplugin.inventory import GpuFacts, KubeletDevice, build_register_devices, kubelet_devices
from hami.deviceplugin.server import (
    CrashBudget,
    PluginServer,
    SocketWatcher,
    register_with_kubelet,
    restart_delay,
)
from hami.testing.kubelet import FakeKubelet
from hami.testing.wait import wait_until

U0 = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"
U1 = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"


class Backend:
    """The servicer's seam, backed by the real inventory and health state."""

    def __init__(self) -> None:
        self.cfg = PluginConfig(device_split_count=2, enable_numa_topology=True)
        self.facts = [GpuFacts(U0, 0, "A", 2**34), GpuFacts(U1, 1, "A", 2**34, numa=1)]
        self.health = HealthState([U0, U1])
        self.allocations: list[list[list[str]]] = []

    def kubelet_devices(self) -> tuple[int, list[KubeletDevice]]:
        gen, health = self.health.snapshot()
        return gen, kubelet_devices(build_register_devices(self.facts, self.cfg, health)[0], self.cfg)

    def wait_health_change(self, seen: int, timeout: float) -> int | None:
        return self.health.wait_change(seen, timeout)

    def allocate(self, requests: Sequence[Sequence[str]]) -> list[pb.ContainerAllocateResponse]:
        self.allocations.append([list(r) for r in requests])
        if len(requests[0]) > 1:
            raise AllocateError(DEVICE_NUMBER_MISMATCH, "device number not matched")
        return [pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": r[0]}) for r in requests]

    def preferred(self, requests: Sequence[PreferredRequest]) -> list[list[str] | None]:
        return [list(r.available[: r.size]) if r.size else None for r in requests]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Backend, PluginServer, FakeKubelet]]:
    kubelet = FakeKubelet(tmp_path)
    kubelet.start()
    backend = Backend()
    server = PluginServer(backend, "nvidia.com/gpu", tmp_path / "nvidia-gpu.sock", workers=4)
    server.start()
    yield backend, server, kubelet
    backend.health.close()
    server.stop()
    kubelet.stop()


def test_register_sends_the_v1beta1_request(served: tuple[Backend, PluginServer, FakeKubelet]) -> None:
    _, _, kubelet = served
    register_with_kubelet(kubelet.socket, "nvidia-gpu.sock", "nvidia.com/gpu", True)
    req = kubelet.next_registration()
    assert (req.version, req.endpoint, req.resource_name) == ("v1beta1", "nvidia-gpu.sock", "nvidia.com/gpu")
    assert req.options.get_preferred_allocation_available and not req.options.pre_start_required


def test_register_without_kubelet_fails(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="cannot reach kubelet"):
        register_with_kubelet(tmp_path / "kubelet.sock", "x.sock", "nvidia.com/gpu", False, timeout=0.5)


def test_list_and_watch_streams_health_changes(served: tuple[Backend, PluginServer, FakeKubelet]) -> None:
    backend, _, kubelet = served
    channel, stub = kubelet.plugin("nvidia-gpu.sock")
    with channel:
        stream = stub.ListAndWatch(pb.Empty())
        first = next(stream)
        assert [(d.ID, d.health) for d in first.devices] == [
            (f"{U0}-0", "Healthy"),
            (f"{U0}-1", "Healthy"),
            (f"{U1}-0", "Healthy"),
            (f"{U1}-1", "Healthy"),
        ]
        assert [n.ID for n in first.devices[2].topology.nodes] == [1]
        threading.Timer(0.05, backend.health.mark_unhealthy, [U1]).start()
        second = next(stream)
        assert {d.ID: d.health for d in second.devices}[f"{U1}-0"] == "Unhealthy"
        assert {d.ID: d.health for d in second.devices}[f"{U0}-0"] == "Healthy"
        stream.cancel()


def test_allocate_options_preferred_and_prestart(served: tuple[Backend, PluginServer, FakeKubelet]) -> None:
    backend, _, kubelet = served
    channel, stub = kubelet.plugin("nvidia-gpu.sock")
    with channel:
        assert stub.GetDevicePluginOptions(pb.Empty()).get_preferred_allocation_available
        resp = stub.Allocate(
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[f"{U0}-1"])])
        )
        assert resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == f"{U0}-1"
        with pytest.raises(grpc.RpcError) as err:
            stub.Allocate(
                pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=["a", "b"])])
            )
        assert err.value.details() == "device number not matched"
        pref = stub.GetPreferredAllocation(
            pb.PreferredAllocationRequest(
                container_requests=[
                    pb.ContainerPreferredAllocationRequest(available_deviceIDs=["x", "y"], allocation_size=1),
                    pb.ContainerPreferredAllocationRequest(available_deviceIDs=["z"], allocation_size=0),
                ]
            )
        )
        assert [list(r.deviceIDs) for r in pref.container_responses] == [["x"]]
        stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=["x"]))
    assert backend.allocations == [[[f"{U0}-1"]], [["a", "b"]]]


def test_a_stale_socket_is_replaced(tmp_path: Path) -> None:
    stale = tmp_path / "nvidia-gpu.sock"
    stale.write_text("left over", encoding="utf-8")
    backend = Backend()
    server = PluginServer(backend, "nvidia.com/gpu", stale, workers=2)
    server.start()
    try:
        with grpc.insecure_channel(f"unix://{stale}") as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
    finally:
        backend.health.close()
        server.stop()
    assert not stale.exists()


def test_socket_watcher_sees_a_kubelet_restart(tmp_path: Path) -> None:
    kubelet = FakeKubelet(tmp_path)
    kubelet.start()
    seen = threading.Event()
    watcher = SocketWatcher(kubelet.socket, seen.set, interval=0.05)
    watcher.start()
    try:
        assert not seen.wait(0.2)
        kubelet.restart()
        assert seen.wait(30)
    finally:
        watcher.stop()
        kubelet.stop()


def test_hamis_give_up_rule() -> None:
    hour = CrashBudget.WINDOW_S
    budget = CrashBudget(now=0.0)
    # Six crashes a minute apart are survived; the seventh in the chain gives up.
    assert [budget.crashed(60.0 * i) for i in range(1, 8)] == [False] * 6 + [True]
    budget = CrashBudget(now=0.0)
    for i in range(1, 7):
        assert not budget.crashed(60.0 * i)
    assert not budget.crashed(360 + hour + 1)  # an hour of quiet: the count starts again
    assert budget.count == 0
    assert [restart_delay(n, 0.5) for n in (1, 2, 3, 7, 20)] == [0.5, 1.0, 2.0, 30.0, 30.0]


def test_a_server_killed_again_and_again_is_served_again_then_given_up(tmp_path: Path) -> None:
    backend = Backend()
    restarts: list[int] = []
    crashes: list[int] = []
    gave_up = threading.Event()
    messages: list[str] = []
    path = tmp_path / "nvidia-gpu.sock"
    server = PluginServer(
        backend,
        "nvidia.com/gpu",
        path,
        workers=2,
        on_restart=lambda: restarts.append(1),
        on_crash=lambda: crashes.append(1),
        on_give_up=lambda message: (messages.append(message), gave_up.set()),  # type: ignore[func-returns-value]
        probe_s=0.02,
        backoff_s=0.01,
    )
    server.start()
    kubelet = FakeKubelet(tmp_path)
    try:
        for n in range(1, 8):
            if n % 2:
                path.unlink()  # someone removed the socket: the kubelet cannot reach the plugin
            else:
                server._server.stop(0)  # type: ignore[union-attr]  # the gRPC core died under us
            if n == 7:
                break
            wait_until(lambda n=n: len(restarts) == n, what=f"restart {n}")  # type: ignore[misc]
            channel, stub = kubelet.plugin("nvidia-gpu.sock")
            with channel:  # served again, and answering
                assert len(next(stub.ListAndWatch(pb.Empty())).devices) == 4
        assert gave_up.wait(30)
        assert messages == ["GRPC server for 'nvidia.com/gpu' has repeatedly crashed recently. Quitting"]
        assert (len(crashes), len(restarts)) == (7, 6)
    finally:
        backend.health.close()
        server.stop()
