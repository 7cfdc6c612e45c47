"""Every crash class of §A: each bad region, slot or device is skipped with a reason.

Section signs (§) refer to docs/design/node-agent-region.md.
"""

import os
import struct
from pathlib import Path

import pytest

from hami.exporter.region import reasons
from hami.exporter.region.file import RegionFile
from hami.exporter.region.parse import RegionRejected, RegionSnapshot, parse_region
from hami.testing.regions import MEM_DATA, RegionWriter, open_region

UUID_A = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
UUID_B = "GPU-bbbbbbbb-1111-2222-3333-444444444444"


def region(version: str = "v1.2") -> tuple[RegionWriter, bytearray]:
    writer, buf = RegionWriter.in_memory(version)
    writer.initialise([UUID_A, UUID_B], limits=[1 << 30, 1 << 30], sm_limits=[50, 0])
    slot = writer.add_process(100)
    writer.change_memory(slot, 0, MEM_DATA, 1000)
    writer.set_sm_util(slot, 0, 20)
    return writer, buf


def snap(buf: bytes | bytearray) -> RegionSnapshot:
    out = parse_region(buf, len(buf))
    assert isinstance(out, RegionSnapshot), out
    return out


def rejected(buf: bytes | bytearray, size: int | None = None) -> RegionRejected:
    out = parse_region(buf, len(buf) if size is None else size)
    assert isinstance(out, RegionRejected), out
    return out


@pytest.mark.parametrize("version", ["v0", "v1.1", "v1.2"])
def test_good_region_reads(version: str) -> None:
    s = snap(region(version)[1])
    assert s.version == version and s.processes == 1 and s.issues == ()
    assert [d.uuid for d in s.devices] == [UUID_A, UUID_B]
    dev = s.devices[0]
    assert (dev.used_bytes, dev.buffer_bytes, dev.sm_util_percent) == (1000, 1000, 20)
    assert (s.devices[0].sm_limit_percent, s.devices[1].sm_limit_percent) == (50, 100)  # 0 = unlimited


def test_magic_absent_is_initialising_not_a_skip() -> None:
    buf = bytearray(2_008_953)
    out = rejected(buf)
    assert (out.state, out.reason) == ("initialising", "")


def test_wrong_magic() -> None:
    _, buf = region()
    struct.pack_into("<i", buf, 0, 12345)
    assert rejected(buf).reason == reasons.BAD_MAGIC


@pytest.mark.parametrize(("size", "reason"), [
    (0, reasons.FILE_TOO_SMALL), (11, reasons.FILE_TOO_SMALL), (12, reasons.BAD_SIZE),
    (1_197_895, reasons.BAD_SIZE), (804_681, reasons.UNKNOWN_VERSION),
])
def test_wrong_size(size: int, reason: str) -> None:
    _, buf = region()
    assert rejected(bytes(buf[:size])).reason == reason


def test_size_window_picks_v0_even_with_major_field() -> None:
    """A v0 file's offset 4 is sm_init_flag: v0 is chosen by size first (§A.8)."""
    writer, buf = region("v0")
    writer.set_field("sm_init_flag", 1)
    assert snap(buf).version == "v0"


@pytest.mark.parametrize(
    ("major", "minor", "expect"), [(2, 0, None), (1, 1, "v1.1"), (1, 2, "v1.2"), (1, 3, "v1.2")]
)
def test_version(major: int, minor: int, expect: str | None) -> None:
    _, buf = region()
    struct.pack_into("<II", buf, 4, major, minor)
    if expect is None:
        assert rejected(buf).reason == reasons.UNKNOWN_VERSION
    else:
        assert snap(buf).version == expect


def test_interim_layout_size_rejected() -> None:
    _, buf = region("v1.1")
    assert rejected(bytes(buf) + b"\0" * 32).reason == reasons.INTERIM_LAYOUT


def test_device_num_over_16() -> None:
    writer, buf = region()
    writer.set_field("device_num", 17)
    assert rejected(buf).reason == reasons.DEVICE_COUNT_OUT_OF_RANGE
    writer.set_field("device_num", 2**64 - 1)
    assert rejected(buf).reason == reasons.DEVICE_COUNT_OUT_OF_RANGE


def test_dead_slots_are_skipped_and_counted() -> None:
    writer, buf = region()
    dead = writer.add_process(200)
    writer.change_memory(dead, 0, MEM_DATA, 5000)
    writer.exit_process(dead)
    s = snap(buf)
    assert s.processes == 1 and s.devices[0].used_bytes == 1000 and s.issues == (reasons.DEAD_SLOT,)
    writer.compact()
    assert snap(buf).issues == ()


def test_status_zero_slot_is_not_summed() -> None:
    writer, buf = region()
    slot = writer.add_process(300)
    writer.change_memory(slot, 0, MEM_DATA, 7)
    writer._r.procs[slot].status = 0
    assert snap(buf).devices[0].used_bytes == 1000


def test_uninitialised_and_bad_uuids_drop_only_that_device() -> None:
    writer, buf = RegionWriter.in_memory("v1.2")
    writer.initialise(["", b"GPU-\xff\xfe-bad", "GPU-\x01ctl", UUID_A])
    s = snap(buf)
    assert [d.index for d in s.devices] == [3]
    assert s.issues == (reasons.UUID_UNINITIALISED, reasons.BAD_UUID, reasons.BAD_UUID)


def test_uuid_truncated_to_40_and_nul_stripped() -> None:
    writer, buf = RegionWriter.in_memory("v1.2")
    writer.initialise([UUID_A + "/1/0"])
    assert snap(buf).devices[0].uuid == UUID_A


def test_usage_over_limit_is_clamped_and_counted() -> None:
    writer, buf = region()
    writer.change_memory(0, 0, MEM_DATA, 2 << 30)
    s = snap(buf)
    assert s.devices[0].used_bytes == 1 << 30 and s.issues == (reasons.USAGE_OVER_LIMIT,)
    assert s.devices[0].over_limit and not s.devices[1].over_limit


def test_usage_at_the_limit_is_not_over_it() -> None:
    writer, buf = region()
    writer.change_memory(0, 0, MEM_DATA, (1 << 30) - 1000)  # the slot already holds 1000 bytes
    s = snap(buf)
    assert s.devices[0].used_bytes == 1 << 30 and not s.devices[0].over_limit and s.issues == ()


def test_underflowed_usage_is_clamped() -> None:
    """rm without add wraps the u64: the huge value never reaches the exposition."""
    writer, buf = region()
    writer.change_memory(0, 1, MEM_DATA, -1)
    s = snap(buf)
    assert s.devices[1].used_bytes == 1 << 30 and reasons.USAGE_OVER_LIMIT in s.issues
    assert s.devices[1].over_limit


def test_sm_over_100_clamped() -> None:
    writer, buf = region()
    other = writer.add_process(101)
    writer.set_sm_util(other, 0, 95)
    s = snap(buf)
    assert s.devices[0].sm_util_percent == 100 and s.issues == (reasons.SM_UTIL_OVER_100,)


def test_sm_limit_over_100_clamped() -> None:
    writer, buf = region()
    writer._r.sm_limit[0] = 250
    s = snap(buf)
    assert s.devices[0].sm_limit_percent == 100 and s.issues == (reasons.SM_LIMIT_OUT_OF_RANGE,)


@pytest.mark.parametrize("proc_num", [-5, 5000])
def test_proc_num_out_of_range_clamped(proc_num: int) -> None:
    writer, buf = region()
    writer.set_field("proc_num", proc_num)
    s = snap(buf)
    assert reasons.PROC_NUM_OUT_OF_RANGE in s.issues
    assert s.processes == (0 if proc_num < 0 else 1)


def test_odd_seqlock_forever_is_torn_and_not_exported() -> None:
    writer, buf = region()
    writer._r.procs[0].seqlock = 3
    s = parse_region(buf, len(buf), retries=5)
    assert isinstance(s, RegionSnapshot)
    assert s.processes == 0 and s.devices[0].used_bytes == 0 and s.issues == (reasons.TORN_READ,)


def test_v11_ignores_seqlock_word() -> None:
    writer, buf = region("v1.1")
    writer._r.procs[0].seqlock = 3  # unused[0] in 1.1: never a lock
    assert snap(buf).processes == 1


def write_file(tmp_path: Path, version: str = "v1.2") -> tuple[str, RegionWriter]:
    path = str(tmp_path / "r.cache")
    writer = RegionWriter.create(path, version)
    writer.initialise([UUID_A], limits=[1 << 30])
    writer.change_memory(writer.add_process(1), 0, MEM_DATA, 64)
    return path, writer


def test_region_file_reads_live_file(tmp_path: Path) -> None:
    path, writer = write_file(tmp_path)
    region = open_region(path)
    assert isinstance(region, RegionFile) and region.writable
    first = region.read()
    assert isinstance(first, RegionSnapshot) and first.devices[0].used_bytes == 64
    writer.change_memory(0, 0, MEM_DATA, 64)
    second = region.read()
    assert isinstance(second, RegionSnapshot) and second.devices[0].used_bytes == 128
    region.close()
    writer.close()


@pytest.mark.parametrize("size", [0, 12, 4096, 1_856 + 1_960, 2_008_896])
def test_truncated_after_open_is_skipped_and_never_grown_back(tmp_path: Path, size: int) -> None:
    path, writer = write_file(tmp_path)
    region = open_region(path)
    assert isinstance(region, RegionFile)
    writer.close()
    os.truncate(path, size)  # a mapping of the old size would SIGBUS on the next read
    out = region.read()
    assert isinstance(out, RegionRejected) and out.reason == reasons.TRUNCATED
    assert not region.write_i32(2_008_904, -1)
    assert os.path.getsize(path) == size
    region.close()


def test_grown_file_still_reads_and_is_reopened_by_discovery(tmp_path: Path) -> None:
    path, writer = write_file(tmp_path)
    region = open_region(path)
    assert isinstance(region, RegionFile)
    with open(path, "ab") as f:
        f.write(b"\0" * 10)
    assert isinstance(region.read(), RegionSnapshot)
    assert region.changed()
    region.close()
    writer.close()


def test_tiny_missing_and_special_files(tmp_path: Path) -> None:
    tiny = tmp_path / "t.cache"
    tiny.write_bytes(b"\1\2\3")
    out = open_region(str(tiny))
    assert isinstance(out, RegionRejected) and out.reason == reasons.FILE_TOO_SMALL
    out = open_region(str(tmp_path / "missing.cache"))
    assert isinstance(out, RegionRejected) and out.reason == reasons.OPEN_FAILED
    os.mkfifo(tmp_path / "f.cache")
    out = open_region(str(tmp_path / "f.cache"))  # returns at once: a FIFO is never opened to read
    assert isinstance(out, RegionRejected) and out.reason == reasons.NOT_REGULAR_FILE
    os.symlink(tiny, tmp_path / "l.cache")
    out = open_region(str(tmp_path / "l.cache"))
    assert isinstance(out, RegionRejected) and out.reason == reasons.SYMLINK
