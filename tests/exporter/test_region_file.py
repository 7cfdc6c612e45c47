"""The file reader copies only the header, the live slots and the tail, and follows proc_num."""

import os
import random
import threading
import time
from pathlib import Path

import pytest

from hami.exporter.feedback import read_state
from hami.exporter.region import reasons
from hami.exporter.region.file import RegionFile
from hami.exporter.region.layout import V0, V1_1, V1_2
from hami.exporter.region.parse import RegionSnapshot, parse_region
from hami.testing.regions import MEM_CONTEXT, MEM_DATA, MEM_MODULE, RegionWriter, open_region

UUID = "GPU-aaaaaaaa-1111-2222-3333-444444444444"


def opened(path: str) -> RegionFile:
    region = open_region(path)
    assert isinstance(region, RegionFile)
    return region


class CountingReads:
    """Counts the bytes ``os.pread`` returns while installed."""

    def __init__(self) -> None:
        self.bytes = 0
        self._real = os.pread

    def __call__(self, fd: int, length: int, offset: int) -> bytes:
        data = self._real(fd, length, offset)
        self.bytes += len(data)
        return data


def test_copies_a_few_kb_and_follows_proc_num(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "r.cache")
    writer = RegionWriter.create(path, "v1.2")
    writer.initialise([UUID], limits=[1 << 30])
    writer.change_memory(writer.add_process(1), 0, MEM_DATA, 100)
    mapped = opened(path)
    reads = CountingReads()
    monkeypatch.setattr(os, "pread", reads)
    first = mapped.read()
    assert isinstance(first, RegionSnapshot) and first.processes == 1
    # the head up to slot 1, three times (before, data, after), and the tail: not 2 MB
    assert reads.bytes <= 3 * V1_2.slot_base(1) + 64
    for pid in range(2, 40):  # 39 slots: the head copies grow with proc_num
        writer.change_memory(writer.add_process(pid), 0, MEM_DATA, 100)
    reads.bytes = 0
    grown = mapped.read()
    assert isinstance(grown, RegionSnapshot) and grown.processes == 39
    assert grown.devices[0].used_bytes == 3900
    assert reads.bytes <= 4 * V1_2.slot_base(39) + 64
    monkeypatch.undo()
    # the split read equals a read of every byte of the file
    with open(path, "rb") as f:
        data = f.read()
    assert parse_region(data, len(data)) == grown
    mapped.close()
    writer.close()


def test_v0_tail_and_feedback_writes_reach_the_file(tmp_path: Path) -> None:
    path = str(tmp_path / "r.cache")
    writer = RegionWriter.create(path, "v0")
    writer.initialise([UUID], limits=[1 << 30])
    writer.add_process(1)
    writer.set_field("recent_kernel", 5)
    writer.set_field("priority", 1)
    mapped = opened(path)
    got = read_state("ctr", mapped)
    assert got is not None
    state, layout = got
    assert (state.recent_kernel, state.priority, state.uuids[0].rstrip(b"\0").decode()) == (5, 1, UUID)
    assert layout is V0
    assert mapped.write_i32(V0.off_recent_kernel, -1)
    assert writer.get_field("recent_kernel") == -1
    size = os.path.getsize(path)
    assert not mapped.write_i32(size - 3, 1)  # past the end: refused, the file is not grown
    assert os.path.getsize(path) == size
    mapped.close()
    writer.close()


def test_initialising_region_is_read_once_ready(tmp_path: Path) -> None:
    path = str(tmp_path / "r.cache")
    writer = RegionWriter.create(path, "v1.2")  # magic not set yet
    mapped = opened(path)
    early = mapped.read()
    assert not isinstance(early, RegionSnapshot) and early.state == "initialising"
    writer.initialise([UUID])
    writer.add_process(7)
    ready = mapped.read()
    assert isinstance(ready, RegionSnapshot) and ready.processes == 1
    mapped.close()
    writer.close()


def test_live_writer_never_yields_torn_values_through_the_copies(tmp_path: Path) -> None:
    path = str(tmp_path / "r.cache")
    writer = RegionWriter.create(path, "v1.2")
    writer.initialise([UUID])
    writer.add_process(1)
    rng = random.Random(3)
    writer.mid_write = lambda: time.sleep(0) if rng.random() < 0.1 else None
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            kind = rng.choice((MEM_CONTEXT, MEM_MODULE, MEM_DATA))
            writer.change_memory(0, 0, kind, rng.randrange(1, 4096))
            time.sleep(0)  # let the reader in between writes too, not only mid-write

    t = threading.Thread(target=hammer)
    t.start()
    mapped = opened(path)
    good = 0
    try:
        for _ in range(300):
            s = mapped.read()
            assert isinstance(s, RegionSnapshot)
            d = s.devices[0]
            assert d.used_bytes == d.context_bytes + d.module_bytes + d.buffer_bytes + d.offset_bytes
            assert s.processes == 1 or s.issues == (reasons.TORN_READ,)
            good += s.processes
            time.sleep(0)
    finally:
        stop.set()
        t.join(30)
        mapped.close()
        writer.close()
    assert good > 0


@pytest.mark.parametrize("version", ["v0", "v1.2"])
def test_every_in_place_write_is_seen_by_the_next_read(tmp_path: Path, version: str) -> None:
    # A region whose copies are unchanged is not parsed again; any exported byte written in place
    # between two reads (slot memory, SM use, limits, proc_num, last kernel time) must show.
    path = str(tmp_path / "r.cache")
    writer = RegionWriter.create(path, version)
    writer.initialise([UUID], limits=[1 << 30], sm_limits=[50])
    slot = writer.add_process(1)
    writer.change_memory(slot, 0, MEM_DATA, 100)
    region = opened(path)
    first = region.read()
    assert isinstance(first, RegionSnapshot)
    assert region.read() == first  # unchanged: the same values
    steps = [
        (lambda: writer.change_memory(slot, 0, MEM_CONTEXT, 7), lambda s: s.devices[0].context_bytes == 7),
        (lambda: writer.set_sm_util(slot, 0, 30), lambda s: s.devices[0].sm_util_percent == 30),
        (lambda: writer.set_field("proc_num", 0), lambda s: s.processes == 0),
        (lambda: writer.set_field("proc_num", 1), lambda s: s.processes == 1),
    ]
    if version != "v0":
        at = 1_700_000_000
        steps.append((lambda: writer.launch_kernel(at), lambda s: s.last_kernel_time == at))
    for write, seen in steps:
        write()
        snap = region.read()
        assert isinstance(snap, RegionSnapshot) and seen(snap), snap
        assert region.read() == snap
    # the limits live in the header, before the slots
    with open(path, "rb") as f:
        data = f.read()
    layout = V0 if version == "v0" else V1_2
    os.pwrite(writer_fd := os.open(path, os.O_WRONLY), (2 << 30).to_bytes(8, "little"), layout.off_limit)
    os.close(writer_fd)
    snap = region.read()
    assert isinstance(snap, RegionSnapshot) and snap.devices[0].limit_bytes == 2 << 30
    assert parse_region(data, len(data)) != snap
    region.close()
    writer.close()


@pytest.mark.parametrize("version", ["v0", "v1.1", "v1.2"])
def test_reads_equal_a_full_parse_after_any_in_place_write(tmp_path: Path, version: str) -> None:
    # One byte written anywhere a parse looks (header, live slots and one past them, the tail), from
    # a clean region the reader keeps: the read must be what parsing every byte of the file gives,
    # whether or not it was parsed again; and again once the byte is back.
    path = str(tmp_path / "r.cache")
    writer = RegionWriter.create(path, version)
    writer.initialise([UUID, UUID.replace("a", "b")], limits=[1 << 30, 1 << 30], sm_limits=[50, 0])
    for pid in (1, 2):
        writer.change_memory(writer.add_process(pid), 0, MEM_DATA, 100)
    region = opened(path)
    layout = {"v0": V0, "v1.1": V1_1, "v1.2": V1_2}[version]
    lkt = layout.off_last_kernel_time
    tail_end = layout.off_priority + 4 if lkt is None else lkt + 8
    areas = [  # (start, length, values written): mostly values a parse accepts, so that it is kept
        (layout.off_device_num, 8, range(3)),
        (layout.off_uuids, 2 * 96, range(0x30, 0x7B)),
        (layout.off_limit, 16, range(256)),
        (layout.off_sm_limit, 16, range(101)),
        (layout.off_procs, 3 * layout.slot_size, range(8)),
        (layout.off_proc_num, 1, range(4)),
        (layout.off_proc_num + 4, tail_end - layout.off_proc_num - 4, range(256)),
    ]
    rng = random.Random(version)
    fd = os.open(path, os.O_RDWR)

    def check() -> None:
        with open(path, "rb") as f:
            data = f.read()
        assert region.read() == parse_region(data, len(data))
        assert region.read() == parse_region(data, len(data))  # unchanged: kept or parsed, the same

    kept = 0
    try:
        check()
        for _ in range(600):
            start, length, values = rng.choice(areas)
            offset = start + rng.randrange(length)
            old = os.pread(fd, 1, offset)
            os.pwrite(fd, bytes([rng.choice(values)]), offset)
            check()
            kept += region.read() is region.read()
            os.pwrite(fd, old, offset)
            check()
    finally:
        os.close(fd)
        region.close()
        writer.close()
    assert kept > 300  # most writes left a region the reader keeps: the comparison above bites


def test_a_region_too_large_to_keep_is_parsed_on_every_read(tmp_path: Path) -> None:
    # 16 devices and a thousand live slots: what a parse reads is megabytes, not kept between scrapes
    path = str(tmp_path / "r.cache")
    writer = RegionWriter.create(path, "v1.2")
    writer.initialise([UUID] * 16, limits=[1 << 40] * 16)
    for pid in range(1, 1001):
        writer.change_memory(writer.add_process(pid), 15, MEM_DATA, 1)
    small = str(tmp_path / "s.cache")
    few = RegionWriter.create(small, "v1.2")
    few.initialise([UUID] * 4)
    for pid in range(1, 5):
        few.add_process(pid)
    large, kept = opened(path), opened(small)
    first = large.read()
    assert isinstance(first, RegionSnapshot) and first.devices[15].used_bytes == 1000
    again = large.read()
    assert again == first and again is not first
    assert kept.read() is kept.read()  # a few devices and processes: kept
    for r, w in ((large, writer), (kept, few)):
        r.close()
        w.close()
