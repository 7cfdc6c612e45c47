"""The mapped reader maps only the header, the live slots and the tail, and follows proc_num."""

import random
import threading
import time
from pathlib import Path

from hami.exporter.feedback import read_state
from hami.exporter.region import reasons
from hami.exporter.region.layout import V0, V1_2
from hami.exporter.region.mapped import PAGE, MappedRegion
from hami.exporter.region.parse import RegionSnapshot, parse_region
from hami.testing.regions import MEM_CONTEXT, MEM_DATA, MEM_MODULE, RegionWriter

UUID = "GPU-aaaaaaaa-1111-2222-3333-444444444444"


def opened(path: str) -> MappedRegion:
    mapped = MappedRegion.open(path)
    assert isinstance(mapped, MappedRegion)
    return mapped


def test_maps_a_few_pages_and_grows_with_proc_num(tmp_path: Path) -> None:
    path = str(tmp_path / "r.cache")
    writer = RegionWriter.create(path, "v1.2")
    writer.initialise([UUID], limits=[1 << 30])
    writer.change_memory(writer.add_process(1), 0, MEM_DATA, 100)
    mapped = opened(path)
    first = mapped.read()
    assert isinstance(first, RegionSnapshot) and first.processes == 1
    assert mapped.mapped_bytes <= 2 * PAGE  # one head page + the tail, not 2 MB
    for pid in range(2, 40):  # 39 slots: the head must grow past 19 pages
        writer.change_memory(writer.add_process(pid), 0, MEM_DATA, 100)
    grown = mapped.read()
    assert isinstance(grown, RegionSnapshot) and grown.processes == 39
    assert grown.devices[0].used_bytes == 3900
    assert V1_2.slot_base(39) <= mapped.mapped_bytes <= V1_2.slot_base(39) + 3 * PAGE
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
    assert not mapped.write_i32(PAGE * 100, 1)  # neither head nor tail: refused, nothing touched
    mapped.close()
    writer.close()


def test_initialising_region_maps_the_tail_once_ready(tmp_path: Path) -> None:
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


def test_live_writer_through_the_mapping_never_yields_torn_values(tmp_path: Path) -> None:
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
