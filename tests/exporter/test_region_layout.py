"""Offsets of the three layouts against the documented numbers (docs/design/node-agent-region.md §A.3) and the
C ABI
(ctypes).

Section signs (§) refer to docs/design/node-agent-region.md.
"""

import ctypes
import struct

import pytest

from hami.exporter.region.layout import LAYOUTS, V0, V1_1, V1_2, Layout
from hami.exporter.region.parse import RegionSnapshot, parse_region
from hami.testing import regions as w

# Literal numbers from §A.1–§A.3, written out rather than computed.
SPEC = {
    "v0": dict(region=1_197_896, slot=1168, procs=1848, device_num=48, uuids=56, limit=1592, sm_limit=1720,
               proc_num=1_197_880, util_switch=1_197_884, recent_kernel=1_197_888, priority=1_197_892,
               used=8, monitorused=648, device_util=776, status=1160),
    "v1": dict(region=2_008_952, slot=1960, procs=1856, device_num=56, uuids=64, limit=1600, sm_limit=1728,
               proc_num=2_008_896, util_switch=2_008_900, recent_kernel=2_008_904, priority=2_008_908,
               used=8, monitorused=1032, device_util=1160, status=1928),
}


@pytest.mark.parametrize(("layout", "key"), [(V0, "v0"), (V1_1, "v1"), (V1_2, "v1")])
def test_layout_tables_match_spec(layout: Layout, key: str) -> None:
    s = SPEC[key]
    assert (layout.region_size, layout.slot_size, layout.off_procs) == (s["region"], s["slot"], s["procs"])
    assert (layout.off_device_num, layout.off_uuids, layout.off_limit, layout.off_sm_limit) == (
        s["device_num"], s["uuids"], s["limit"], s["sm_limit"])
    tail = (layout.off_proc_num, layout.off_utilization_switch, layout.off_recent_kernel, layout.off_priority)
    assert tail == (s["proc_num"], s["util_switch"], s["recent_kernel"], s["priority"])
    assert (layout.slot_off_used, layout.slot_off_monitorused, layout.slot_off_device_util,
            layout.slot_off_status) == (s["used"], s["monitorused"], s["device_util"], s["status"])
    assert layout.off_procs + 1024 * layout.slot_size == layout.off_proc_num


def test_v1_extras_and_file_sizes() -> None:
    assert (V1_1.off_major, V1_1.off_minor, V1_1.off_last_kernel_time) == (4, 8, 2_008_912)
    assert (V1_2.slot_off_seqlock, V1_2.off_sem_postinit) == (1936, 2_008_920)
    assert V1_1.slot_off_seqlock is None and V0.off_last_kernel_time is None
    assert [lay.file_size for lay in LAYOUTS] == [1_197_897, 2_008_953, 2_008_953]


def test_ctypes_mirror_agrees_with_tables() -> None:
    """The writer's C-ABI structs and the reader's tables are derived independently."""
    assert ctypes.sizeof(w.RegionV0) == V0.region_size and ctypes.sizeof(w.SlotV0) == V0.slot_size
    assert ctypes.sizeof(w.RegionV1) == V1_2.region_size and ctypes.sizeof(w.SlotV1) == V1_2.slot_size
    for struct_, layout in ((w.RegionV0, V0), (w.RegionV1, V1_2)):
        assert struct_.device_num.offset == layout.off_device_num
        assert struct_.uuids.offset == layout.off_uuids
        assert struct_.limit.offset == layout.off_limit
        assert struct_.sm_limit.offset == layout.off_sm_limit
        assert struct_.procs.offset == layout.off_procs
        assert struct_.proc_num.offset == layout.off_proc_num
        assert struct_.priority.offset == layout.off_priority
    assert w.RegionV1.last_kernel_time.offset == 2_008_912
    assert w.RegionV1.sem_postinit.offset == 2_008_920
    assert w.SlotV1.seqlock.offset == 1936 and w.SlotV1.status.offset == 1928
    assert w.SlotV0.status.offset == 1160 and w.SlotV0.device_util.offset == 776


def test_golden_bytes_v12() -> None:
    """Values land at the documented address formulas; magic bytes on disk are 4E F7 2F 01."""
    writer, buf = w.RegionWriter.in_memory("v1.2")
    writer.initialise(["GPU-0", "GPU-1"], limits=[111, 222], sm_limits=[30, 60], priority=0)
    writer.add_process(7, 70)
    slot = writer.add_process(8, 80)
    writer.change_memory(slot, 1, w.MEM_DATA, 4096)
    writer.set_sm_util(slot, 1, 42)
    assert len(buf) == 2_008_953
    assert bytes(buf[0:4]) == bytes.fromhex("4EF72F01")
    assert struct.unpack_from("<II", buf, 4) == (1, 2)
    assert struct.unpack_from("<Q", buf, 56)[0] == 2
    assert bytes(buf[64 + 96:64 + 96 + 6]) == b"GPU-1\0"
    assert struct.unpack_from("<2Q", buf, 1600) == (111, 222)
    assert struct.unpack_from("<2Q", buf, 1728) == (30, 60)
    base = 1856 + 1960 * 1
    assert struct.unpack_from("<ii", buf, base) == (8, 80)
    assert struct.unpack_from("<Q", buf, base + 8 + 64 * 1 + 32)[0] == 4096  # used[1].total
    assert struct.unpack_from("<Q", buf, base + 8 + 64 * 1 + 16)[0] == 4096  # used[1].data_size
    assert struct.unpack_from("<Q", buf, base + 1160 + 48 * 1 + 16)[0] == 42  # sm_util
    assert struct.unpack_from("<i", buf, base + 1928)[0] == 1  # status
    assert struct.unpack_from("<Q", buf, base + 1936)[0] == 2  # seqlock: one write, even
    assert struct.unpack_from("<iiii", buf, 2_008_896) == (2, 1, 2, 0)


def test_golden_bytes_v0() -> None:
    writer, buf = w.RegionWriter.in_memory("v0")
    writer.initialise(["GPU-0"], limits=[1 << 20], sm_limits=[50])
    slot = writer.add_process(9)
    writer.change_memory(slot, 0, w.MEM_CONTEXT, 300)
    writer.set_sm_util(slot, 0, 12)
    assert len(buf) == 1_197_897
    assert struct.unpack_from("<Q", buf, 48)[0] == 1
    assert struct.unpack_from("<Q", buf, 1848 + 8 + 32)[0] == 300
    assert struct.unpack_from("<Q", buf, 1848 + 776 + 16)[0] == 12
    assert struct.unpack_from("<i", buf, 1848 + 1160)[0] == 1
    snap = parse_region(buf, len(buf))
    assert isinstance(snap, RegionSnapshot) and snap.version == "v0" and snap.last_kernel_time == 0
    (dev,) = snap.devices
    values = (dev.used_bytes, dev.context_bytes, dev.sm_util_percent, dev.sm_limit_percent)
    assert values == (300, 300, 12, 50)
