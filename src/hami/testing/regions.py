"""Byte-exact HAMi-core shared-region writer (v0, v1.1, v1.2) for tests, benchmarks and simnode.

The layouts are declared as ctypes structures that mirror HAMi-core's C structs (MML.h), so the
offsets come from the C ABI rules, independently of the reader's offset tables. Writes follow
HAMi-core's order: the magic is stored last on creation, and in v1.2 every ``used[]`` update is
bracketed by the slot seqlock (odd while writing, docs/design/node-agent-region.md §A.6). ``open_region``
opens a file for the monitor's reader the way its discovery does (by directory descriptor).
"""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Callable, Sequence
from typing import Any, Final

from hami.exporter.region.file import RegionFile
from hami.exporter.region.parse import RegionRejected

MAGIC: Final = 19920718
MAX_DEVICES: Final = 16
MAX_PROCS: Final = 1024
MEM_CONTEXT, MEM_MODULE, MEM_DATA = 0, 1, 2  # HAMi-core's usage "type" argument

U64 = ctypes.c_uint64
I32 = ctypes.c_int32
Uuid = ctypes.c_char * 96


class SemT(ctypes.Structure):
    """glibc sem_t: 32 bytes, 8-aligned. Never touched: monitors must not take or post it."""

    _fields_ = (("raw", U64 * 4),)


class DeviceMemoryV0(ctypes.Structure):
    _fields_ = (
        ("context_size", U64),
        ("module_size", U64),
        ("data_size", U64),
        ("offset", U64),
        ("total", U64),
    )


class DeviceMemoryV1(ctypes.Structure):
    _fields_ = (*DeviceMemoryV0._fields_, ("unused", U64 * 3))


class DeviceUtilV0(ctypes.Structure):
    _fields_ = (("dec_util", U64), ("enc_util", U64), ("sm_util", U64))


class DeviceUtilV1(ctypes.Structure):
    _fields_ = (*DeviceUtilV0._fields_, ("unused", U64 * 3))


class SlotV0(ctypes.Structure):
    _fields_ = (
        ("pid", I32),
        ("hostpid", I32),
        ("used", DeviceMemoryV0 * MAX_DEVICES),
        ("monitorused", U64 * MAX_DEVICES),
        ("device_util", DeviceUtilV0 * MAX_DEVICES),
        ("status", I32),
    )


class SlotV1(ctypes.Structure):
    # v1.1 has unused[3] where v1.2 has seqlock + unused[2]; the bytes are the same.
    _fields_ = (
        ("pid", I32),
        ("hostpid", I32),
        ("used", DeviceMemoryV1 * MAX_DEVICES),
        ("monitorused", U64 * MAX_DEVICES),
        ("device_util", DeviceUtilV1 * MAX_DEVICES),
        ("status", I32),
        ("seqlock", U64),
        ("unused", U64 * 2),
    )


class RegionV0(ctypes.Structure):
    _fields_ = (
        ("initialized_flag", I32),
        ("sm_init_flag", I32),
        ("owner_pid", U64),
        ("sem", SemT),
        ("device_num", U64),
        ("uuids", Uuid * MAX_DEVICES),
        ("limit", U64 * MAX_DEVICES),
        ("sm_limit", U64 * MAX_DEVICES),
        ("procs", SlotV0 * MAX_PROCS),
        ("proc_num", I32),
        ("utilization_switch", I32),
        ("recent_kernel", I32),
        ("priority", I32),
    )


class RegionV1(ctypes.Structure):
    # v1.1 has unused[4] where v1.2 has sem_postinit; the bytes are the same.
    _fields_ = (
        ("initialized_flag", I32),
        ("major_version", ctypes.c_uint32),
        ("minor_version", ctypes.c_uint32),
        ("sm_init_flag", I32),
        ("owner_pid", U64),
        ("sem", SemT),
        ("device_num", U64),
        ("uuids", Uuid * MAX_DEVICES),
        ("limit", U64 * MAX_DEVICES),
        ("sm_limit", U64 * MAX_DEVICES),
        ("procs", SlotV1 * MAX_PROCS),
        ("proc_num", I32),
        ("utilization_switch", I32),
        ("recent_kernel", I32),
        ("priority", I32),
        ("last_kernel_time", U64),
        ("sem_postinit", SemT),
    )


VERSIONS: Final = {"v0": RegionV0, "v1.1": RegionV1, "v1.2": RegionV1}


def file_size(version: str) -> int:
    """HAMi-core extends the file to sizeof + 1 (it writes one NUL at offset sizeof)."""
    return ctypes.sizeof(VERSIONS[version]) + 1


class RegionWriter:
    """Writes one region in a writable buffer (a bytearray, or an mmap from ``create``)."""

    def __init__(self, buf: bytearray | mmap.mmap, version: str = "v1.2") -> None:
        self.version = version
        self._mm = buf if isinstance(buf, mmap.mmap) else None
        self._r: Any = VERSIONS[version].from_buffer(buf)
        # Test hook between the two halves of a seqlocked write (lets a test park a writer there).
        self.mid_write: Callable[[], None] | None = None

    @classmethod
    def create(cls, path: str, version: str = "v1.2") -> RegionWriter:
        """Create the cache file as ``try_create_shrreg`` does: sizeof + 1 bytes, mapped shared."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            os.lseek(fd, file_size(version) - 1, os.SEEK_SET)
            os.write(fd, b"\0")
            mm = mmap.mmap(fd, file_size(version), mmap.MAP_SHARED)
        finally:
            os.close(fd)
        return cls(mm, version)

    @classmethod
    def in_memory(cls, version: str = "v1.2") -> tuple[RegionWriter, bytearray]:
        buf = bytearray(file_size(version))
        return cls(buf, version), buf

    def initialise(
        self,
        uuids: Sequence[str | bytes],
        *,
        limits: Sequence[int] = (),
        sm_limits: Sequence[int] = (),
        priority: int = 1,
        device_num: int | None = None,
        magic: int = MAGIC,
    ) -> None:
        """The first attacher's initialisation; the magic is stored last (after a fence in C)."""
        r = self._r
        if self.version != "v0":
            r.major_version, r.minor_version = 1, 2 if self.version == "v1.2" else 1
        r.sm_init_flag = 0
        r.utilization_switch, r.recent_kernel, r.proc_num = 1, 2, 0
        r.priority = priority
        r.device_num = len(uuids) if device_num is None else device_num
        for i, uuid in enumerate(uuids):
            raw = uuid.encode() if isinstance(uuid, str) else uuid
            ctypes.memmove(ctypes.addressof(r.uuids[i]), raw.ljust(96, b"\0")[:96], 96)
            r.limit[i] = limits[i] if i < len(limits) else 0
            r.sm_limit[i] = sm_limits[i] if i < len(sm_limits) else 100
        r.initialized_flag = magic

    def set_field(self, name: str, value: int) -> None:
        setattr(self._r, name, value)

    def get_field(self, name: str) -> int:
        return int(getattr(self._r, name))

    def add_process(self, pid: int, hostpid: int = 0) -> int:
        """Claim the next slot for ``pid`` (init_proc_slot_withlock); returns its index."""
        i = int(self._r.proc_num)
        slot = self._r.procs[i]
        ctypes.memset(ctypes.addressof(slot), 0, ctypes.sizeof(slot))
        slot.pid, slot.hostpid, slot.status = pid, hostpid, 1
        self._r.proc_num = i + 1
        return i

    def exit_process(self, slot: int) -> None:
        """Normal exit (exit_handler): pid and status go to 0; compaction happens later."""
        s = self._r.procs[slot]
        s.pid, s.status = 0, 0

    def compact(self) -> None:
        """Remove dead slots, moving the last slot into each hole (clear_proc_slot_nolock)."""
        r = self._r
        i = 0
        while i < r.proc_num:
            if r.procs[i].pid == 0:
                last = r.proc_num - 1
                if last != i:
                    size = ctypes.sizeof(r.procs[i])
                    ctypes.memmove(ctypes.addressof(r.procs[i]), ctypes.addressof(r.procs[last]), size)
                ctypes.memset(ctypes.addressof(r.procs[last]), 0, ctypes.sizeof(r.procs[last]))
                r.proc_num = last
            else:
                i += 1

    def pids(self) -> list[int]:
        """The pid of each slot in ``[0, proc_num)``, in slot order."""
        return [int(self._r.procs[i].pid) for i in range(int(self._r.proc_num))]

    def change_memory(self, slot: int, dev: int, kind: int, delta: int) -> None:
        """add_/rm_gpu_device_memory_usage: ``total`` and one bucket move by ``delta`` (mod 2^64)."""
        s = self._r.procs[slot]
        mem = s.used[dev]
        seq = self.version == "v1.2"
        if seq:
            s.seqlock = s.seqlock + 1  # odd: write in progress
        mem.total = (mem.total + delta) % 2**64
        if self.mid_write is not None:
            self.mid_write()
        bucket = ("context_size", "module_size", "data_size")[kind]
        setattr(mem, bucket, (getattr(mem, bucket) + delta) % 2**64)
        if seq:
            s.seqlock = s.seqlock + 1  # even: complete

    def set_sm_util(self, slot: int, dev: int, percent: int) -> None:
        self._r.procs[slot].device_util[dev].sm_util = percent

    def set_monitorused(self, slot: int, dev: int, nbytes: int) -> None:
        self._r.procs[slot].monitorused[dev] = nbytes

    def launch_kernel(self, now: int) -> None:
        """What pre_launch_kernel / rate_limiter leave behind: recent_kernel=2, last_kernel_time."""
        self._r.recent_kernel = 2
        if self.version != "v0":
            self._r.last_kernel_time = max(int(self._r.last_kernel_time), now)

    def close(self) -> None:
        self._r = None
        if self._mm is not None:
            self._mm.close()
            self._mm = None


def open_region(path: str) -> RegionFile | RegionRejected:
    """The monitor's reader on ``path``, opened relative to its directory as discovery opens it."""
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        return RegionFile.open(dir_fd, os.path.basename(path), path)
    finally:
        os.close(dir_fd)
