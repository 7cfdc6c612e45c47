"""Byte layouts of HAMi-core's shared region ("cudevshr cache"), as data (§A.1–§A.3).

x86-64 Linux/glibc, little-endian, naturally aligned. ``tests/exporter/test_region_layout.py`` checks every
offset against ctypes structures (the C ABI).

Section signs (§) refer to docs/design/node-agent-region.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

MAGIC: Final = 19920718  # MULTIPROCESS_SHARED_REGION_MAGIC_FLAG, int32 at offset 0
MAX_DEVICES: Final = 16  # CUDA_DEVICE_MAX_COUNT
MAX_PROCS: Final = 1024  # SHARED_REGION_MAX_PROCESS_NUM
UUID_LEN: Final = 96  # typedef char uuid[96]
UUID_EXPORT_LEN: Final = 40  # HAMi's monitor truncates DeviceUUID(i) to [0:40]
HEADER_MIN: Final = 12  # magic, major, minor int32: HAMi rejects smaller files

# Interim HAMi-core builds (2026-01..03) labelled "1.1" with a shifted layout one variant of which
# is 2 008 984 bytes (file = +1); the same-size variant cannot be told apart (§A.2).
INTERIM_V11_FILE_SIZE: Final = 2_008_985


@dataclass(frozen=True)
class Layout:
    """Offsets of one layout version. ``None`` marks a field the version does not have."""

    name: str
    region_size: int  # sizeof(shared_region_t); the file is region_size + 1 bytes
    # shared_region_t
    off_major: int | None
    off_minor: int | None
    off_sm_init_flag: int
    off_owner_pid: int
    off_sem: int
    off_device_num: int
    off_uuids: int
    off_limit: int
    off_sm_limit: int
    off_procs: int
    off_proc_num: int
    off_utilization_switch: int
    off_recent_kernel: int
    off_priority: int
    off_last_kernel_time: int | None
    off_sem_postinit: int | None
    # shrreg_proc_slot_t, relative to the slot base
    slot_size: int
    mem_stride: int  # sizeof(device_memory_t)
    util_stride: int  # sizeof(device_util_t)
    slot_off_pid: int
    slot_off_hostpid: int
    slot_off_used: int
    slot_off_monitorused: int
    slot_off_device_util: int
    slot_off_status: int
    slot_off_seqlock: int | None

    @property
    def file_size(self) -> int:
        return self.region_size + 1

    def slot_base(self, i: int) -> int:
        return self.off_procs + self.slot_size * i


# device_memory_t field offsets (both versions): context, module, data, offset, total.
MEM_CONTEXT: Final = 0
MEM_MODULE: Final = 8
MEM_DATA: Final = 16
MEM_OFFSET: Final = 24
MEM_TOTAL: Final = 32
UTIL_SM: Final = 16  # device_util_t.sm_util

V0: Final = Layout(
    name="v0",
    region_size=1_197_896,
    off_major=None,
    off_minor=None,
    off_sm_init_flag=4,
    off_owner_pid=8,
    off_sem=16,
    off_device_num=48,
    off_uuids=56,
    off_limit=1592,
    off_sm_limit=1720,
    off_procs=1848,
    off_proc_num=1_197_880,
    off_utilization_switch=1_197_884,
    off_recent_kernel=1_197_888,
    off_priority=1_197_892,
    off_last_kernel_time=None,
    off_sem_postinit=None,
    slot_size=1168,
    mem_stride=40,
    util_stride=24,
    slot_off_pid=0,
    slot_off_hostpid=4,
    slot_off_used=8,
    slot_off_monitorused=648,
    slot_off_device_util=776,
    slot_off_status=1160,
    slot_off_seqlock=None,
)

V1_1: Final = Layout(
    name="v1.1",
    region_size=2_008_952,
    off_major=4,
    off_minor=8,
    off_sm_init_flag=12,
    off_owner_pid=16,
    off_sem=24,
    off_device_num=56,
    off_uuids=64,
    off_limit=1600,
    off_sm_limit=1728,
    off_procs=1856,
    off_proc_num=2_008_896,
    off_utilization_switch=2_008_900,
    off_recent_kernel=2_008_904,
    off_priority=2_008_908,
    off_last_kernel_time=2_008_912,
    off_sem_postinit=None,
    slot_size=1960,
    mem_stride=64,
    util_stride=48,
    slot_off_pid=0,
    slot_off_hostpid=4,
    slot_off_used=8,
    slot_off_monitorused=1032,
    slot_off_device_util=1160,
    slot_off_status=1928,
    slot_off_seqlock=None,
)

# 1.2 is 1.1 plus the slot seqlock (old unused[0]) and sem_postinit (old region unused[4]).
V1_2: Final = replace(V1_1, name="v1.2", off_sem_postinit=2_008_920, slot_off_seqlock=1936)

LAYOUTS: Final = (V0, V1_1, V1_2)
