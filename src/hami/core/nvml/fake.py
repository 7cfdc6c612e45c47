"""A faithful in-memory NVML: same calls, same errors, state a simulator can drive.

Behaves like the library where callers can tell: ``INVALID_ARGUMENT`` for a bad index,
``NOT_FOUND`` for an unknown UUID, ``UNINITIALIZED`` after ``close``, ``NOT_SUPPORTED`` for
calls a GPU lacks (``unsupported`` in the spec, MIG on a non-MIG GPU, unsupported event types),
``TIMEOUT`` from an empty event wait (reported as ``None``). Failures can be injected per call
and per device with ``fail``; Xids with ``inject_xid``, or from the spec's ``events`` schedule (a
thread raises them on time), which is how a fake held by another process is driven.

This module holds the session (``FakeNvml``) and its event sets; the devices are in
``hami.core.nvml.fake_device``.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from hami.core.nvml.api import (
    CODE_NAMES,
    EVENT_XID_CRITICAL,
    MEMORY_LIMIT_MAX,
    NO_INSTANCE,
    NvmlDevice,
    NvmlError,
    ProcessInfo,
    XidEvent,
)
from hami.core.nvml.fake_device import FakeDevice
from hami.core.nvml.fake_spec import FakeEvent, FakeGpu, FakeNode, load_spec

_MUTABLE = frozenset(f.name for f in fields(FakeGpu))


@dataclass
class _Failure:
    call: str
    device: int | None
    code: int | str
    times: int | None  # None = until cleared


class FakeNvml:
    """``FakeNvml(spec)`` = ``nvmlInit`` on a node described by ``spec`` (dict or YAML path)."""

    def __init__(self, spec: dict[str, Any] | str | Path | FakeNode) -> None:
        self.node = spec if isinstance(spec, FakeNode) else load_spec(spec)
        # Simulators that change several fields at once hold this lock.
        self.lock = threading.RLock()
        self._failures: list[_Failure] = []
        self._event_sets: list[FakeEventSet] = []
        self.calls: dict[str, int] = {}
        self.created = 0  # compute instances created, for fresh MIG UUIDs as the driver gives
        self._open = False
        if self.node.init_error is not None:
            raise NvmlError("nvmlInit", self.node.init_error, "fake node without a usable driver")
        self._open = True
        self._closed = threading.Event()
        self._scheduler: threading.Thread | None = None
        if self.node.events:
            self._scheduler = threading.Thread(
                target=self._run_schedule, args=(self.node.events,), name="fake-nvml-events", daemon=True
            )
            self._scheduler.start()

    def _run_schedule(self, events: list[FakeEvent]) -> None:
        """Raise the spec's scheduled Xids on time until ``close``."""
        start = time.monotonic()
        due = [(start + e.after_seconds, i, e) for i, e in enumerate(events)]
        heapq.heapify(due)
        while due and not self._closed.wait(max(due[0][0] - time.monotonic(), 0.0)):
            at, i, event = heapq.heappop(due)
            self.inject_xid(event.device, event.xid)
            if event.every_seconds is not None:
                heapq.heappush(due, (at + event.every_seconds, i, event))

    # ---- test and simulator controls ----

    def fail(
        self, call: str, device: int | None = None, code: int | str = "UNKNOWN", times: int | None = None
    ) -> None:
        """Make ``call`` (an NVML function name) fail with ``code`` on ``device`` (None = every device),
        ``times`` times (None = until ``clear_failures``)."""
        if isinstance(code, str) and code not in CODE_NAMES:
            raise ValueError(f"unknown NVML return code {code!r}")
        with self.lock:
            self._failures.append(_Failure(call, device, code, times))

    def clear_failures(self) -> None:
        with self.lock:
            self._failures.clear()

    def update(self, index: int, **changes: Any) -> None:
        """Set fields of GPU ``index`` (``utilization_gpu=50, memory_used=...``), checked for sanity."""
        unknown = set(changes) - _MUTABLE
        if unknown:
            raise ValueError(f"unknown fake GPU fields: {sorted(unknown)}")
        with self.lock:
            gpu = self.node.gpus[index]
            candidate = replace(gpu, **changes)
            if not 0 <= candidate.memory_used <= candidate.memory_total:
                raise ValueError(f"memory_used {candidate.memory_used} outside [0, {candidate.memory_total}]")
            for pct in (candidate.utilization_gpu, candidate.utilization_memory):
                if not 0 <= pct <= 100:
                    raise ValueError(f"utilization {pct} outside [0, 100]")
            self.node.gpus[index] = candidate

    def set_processes(self, index: int, processes: list[tuple[int, int | None]]) -> None:
        self.update(index, processes=[ProcessInfo(pid, mem) for pid, mem in processes])

    def add_cgroup(self, cgroup: str) -> None:
        """A cgroup (full sysfs path) appears: it starts without limits and without use."""
        with self.lock:
            self.node.cgroups.add(cgroup)

    def remove_cgroup(self, cgroup: str) -> None:
        """The cgroup is gone, and with it its limits on every GPU (as the driver clears them)."""
        with self.lock:
            self.node.cgroups.discard(cgroup)
            for gpu in self.node.gpus:
                gpu.cgroup_memory.pop(cgroup, None)

    def set_cgroup_usage(self, index: int, cgroup: str, used: int) -> None:
        """The memory the driver accounts to ``cgroup`` on GPU ``index`` (its allocations there)."""
        with self.lock:
            if cgroup not in self.node.cgroups or used < 0:
                raise ValueError(f"no cgroup {cgroup!r}, or a negative use {used}")
            entry = self.node.gpus[index].cgroup_memory.setdefault(cgroup, [0, MEMORY_LIMIT_MAX, 0])
            entry[2] = used

    def inject_event(
        self, index: int, event_type: int, data: int, gi: int = NO_INSTANCE, ci: int = NO_INSTANCE
    ) -> None:
        """Deliver an event from GPU ``index`` to every event set registered for that type on it."""
        with self.lock:
            uuid = self.node.gpus[index].uuid
            for es in self._event_sets:
                es._deliver(index, XidEvent(uuid, event_type, data, gi, ci))

    def inject_xid(self, index: int, xid: int, gi: int = NO_INSTANCE, ci: int = NO_INSTANCE) -> None:
        self.inject_event(index, EVENT_XID_CRITICAL, xid, gi, ci)

    # ---- the NVML surface ----

    def _call(self, call: str, device: int | None = None) -> None:
        """Count the call, then fail it as NVML would: uninitialised, unsupported, or injected."""
        with self.lock:
            self.calls[call] = self.calls.get(call, 0) + 1
            if not self._open:
                raise NvmlError(call, "UNINITIALIZED")
            if device is not None and self.node.gpus[device].lost:
                raise NvmlError(call, "GPU_IS_LOST")
            if device is not None and call in self.node.gpus[device].unsupported:
                raise NvmlError(call, "NOT_SUPPORTED")
            for f in self._failures:
                if f.call == call and (f.device is None or f.device == device):
                    if f.times is not None:
                        f.times -= 1
                        if f.times <= 0:
                            self._failures.remove(f)
                    raise NvmlError(call, f.code, "injected")

    def device_count(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.node.gpus)

    def device(self, index: int) -> FakeDevice:
        self._call("nvmlDeviceGetHandleByIndex", index if 0 <= index < len(self.node.gpus) else None)
        if not 0 <= index < len(self.node.gpus):
            raise NvmlError("nvmlDeviceGetHandleByIndex", "INVALID_ARGUMENT", f"index {index}")
        return FakeDevice(self, index)

    def device_by_uuid(self, uuid: str) -> FakeDevice:
        self._call("nvmlDeviceGetHandleByUUID")
        for i, gpu in enumerate(self.node.gpus):
            if gpu.uuid == uuid:
                if gpu.lost:
                    raise NvmlError("nvmlDeviceGetHandleByUUID", "GPU_IS_LOST", uuid)
                return FakeDevice(self, i)
        raise NvmlError("nvmlDeviceGetHandleByUUID", "NOT_FOUND", uuid)

    def driver_version(self) -> str:
        self._call("nvmlSystemGetDriverVersion")
        return self.node.driver_version

    def cuda_driver_version(self) -> int:
        self._call("nvmlSystemGetCudaDriverVersion")
        return self.node.cuda_driver_version

    def event_set(self) -> FakeEventSet:
        self._call("nvmlEventSetCreate")
        es = FakeEventSet(self)
        with self.lock:
            self._event_sets.append(es)
        return es

    def close(self) -> None:
        with self.lock:
            self._open = False
            for es in self._event_sets:
                es._wake()
        self._closed.set()
        if self._scheduler is not None and self._scheduler is not threading.current_thread():
            self._scheduler.join(5)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class FakeEventSet:
    def __init__(self, nvml: FakeNvml) -> None:
        self._nvml = nvml
        self._masks: dict[int, int] = {}
        self._queue: deque[XidEvent] = deque()
        self._cond = threading.Condition(nvml.lock)
        self._closed = False

    def register(self, device: NvmlDevice, event_types: int) -> None:
        if not isinstance(device, FakeDevice) or device._nvml is not self._nvml:
            raise NvmlError(
                "nvmlDeviceRegisterEvents", "INVALID_ARGUMENT", "not a device of this NVML session"
            )
        self._nvml._call("nvmlDeviceRegisterEvents", device.index)
        with self._cond:
            supported = self._nvml.node.gpus[device.index].supported_events
            if event_types & ~supported:
                raise NvmlError("nvmlDeviceRegisterEvents", "NOT_SUPPORTED", f"mask {event_types:#x}")
            self._masks[device.index] = self._masks.get(device.index, 0) | event_types

    def _deliver(self, index: int, event: XidEvent) -> None:
        with self._cond:
            if not self._closed and self._masks.get(index, 0) & event.event_type:
                self._queue.append(event)
                self._cond.notify_all()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait(self, timeout_ms: int) -> XidEvent | None:
        """Block up to ``timeout_ms`` for an event; ``None`` is NVML's TIMEOUT."""
        self._nvml._call("nvmlEventSetWait")
        with self._cond:
            if self._closed:
                raise NvmlError("nvmlEventSetWait", "INVALID_ARGUMENT", "event set freed")
            self._cond.wait_for(
                lambda: bool(self._queue) or not self._nvml._open or self._closed, max(timeout_ms, 0) / 1000
            )
            if not self._nvml._open:
                raise NvmlError("nvmlEventSetWait", "UNINITIALIZED")
            return self._queue.popleft() if self._queue else None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
            if self in self._nvml._event_sets:
                self._nvml._event_sets.remove(self)
