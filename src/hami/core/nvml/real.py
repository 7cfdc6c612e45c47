"""NVML through ``pynvml`` (nvidia-ml-py): ``nvmlInit`` once per ``RealNvml``, ``nvmlShutdown`` on close.

This module holds the session (``RealNvml``) and its event sets; the devices, and the guarded
session they share, are in ``hami.core.nvml.real_device``.
"""

from __future__ import annotations

import ctypes
from types import TracebackType
from typing import Any, Self

import pynvml

from hami.core.nvml.api import NvmlDevice, NvmlError, XidEvent
from hami.core.nvml.real_device import RealDevice, _code, _Session, _text

_INIT_HINT = "is the NVIDIA driver installed and libnvidia-ml.so.1 on the library path?"


def _address(handle: Any) -> int | None:
    return ctypes.cast(handle, ctypes.c_void_p).value


class RealEventSet:
    def __init__(self, session: _Session) -> None:
        self._s = session
        self._set = session.call("nvmlEventSetCreate", pynvml.nvmlEventSetCreate)
        self._uuids: dict[int | None, str] = {}
        self._closed = False

    def register(self, device: NvmlDevice, event_types: int) -> None:
        if not isinstance(device, RealDevice):
            raise NvmlError(
                "nvmlDeviceRegisterEvents", "INVALID_ARGUMENT", "not a device of this NVML session"
            )
        call = pynvml.nvmlDeviceRegisterEvents
        self._s.call("nvmlDeviceRegisterEvents", call, device.handle, event_types, self._set)
        self._uuids[_address(device.handle)] = device.uuid()

    def wait(self, timeout_ms: int) -> XidEvent | None:
        try:
            data = self._s.call("nvmlEventSetWait", pynvml.nvmlEventSetWait, self._set, timeout_ms)
        except NvmlError as exc:
            if exc.code == "TIMEOUT":
                return None
            raise
        uuid = self._uuids.get(_address(data.device), "")
        return XidEvent(
            uuid,
            int(data.eventType),
            int(data.eventData),
            int(data.gpuInstanceId),
            int(data.computeInstanceId),
        )

    def close(self) -> None:
        if not self._closed and self._s.open:
            self._closed = True
            self._s.call("nvmlEventSetFree", pynvml.nvmlEventSetFree, self._set)


class RealNvml:
    """``nvmlInit`` here, once; ``NvmlError(call="nvmlInit")`` when the driver or library is missing."""

    def __init__(self) -> None:
        self._s = _Session()
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlError("nvmlInit", _code(exc), f"{exc}; {_INIT_HINT}") from None
        self._s.open = True

    def device_count(self) -> int:
        return int(self._s.call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount))

    def device(self, index: int) -> RealDevice:
        if index < 0:
            raise NvmlError("nvmlDeviceGetHandleByIndex", "INVALID_ARGUMENT", f"index {index}")
        handle = self._s.call("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index)
        return RealDevice(self._s, handle, index)

    def device_by_uuid(self, uuid: str) -> RealDevice:
        handle = self._s.call("nvmlDeviceGetHandleByUUID", pynvml.nvmlDeviceGetHandleByUUID, uuid)
        index = self._s.call("nvmlDeviceGetIndex", pynvml.nvmlDeviceGetIndex, handle)
        return RealDevice(self._s, handle, int(index))

    def driver_version(self) -> str:
        return _text(self._s.call("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion))

    def cuda_driver_version(self) -> int:
        return int(self._s.call("nvmlSystemGetCudaDriverVersion", pynvml.nvmlSystemGetCudaDriverVersion))

    def event_set(self) -> RealEventSet:
        return RealEventSet(self._s)

    def close(self) -> None:
        with self._s.lock:
            if not self._s.open:
                return
            self._s.open = False
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:
            raise NvmlError("nvmlShutdown", _code(exc), str(exc)) from None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
