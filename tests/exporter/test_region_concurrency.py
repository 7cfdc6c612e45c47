"""A writer thread hammering a slot under the v1.2 seqlock: no torn value is ever exported."""

import random
import struct
import threading
import time

from hami.exporter.region import reasons
from hami.exporter.region.parse import RegionSnapshot, parse_region
from hami.testing.regions import MEM_CONTEXT, MEM_DATA, MEM_MODULE, RegionWriter

UUIDS = ["GPU-aaaaaaaa-1111-2222-3333-444444444444", "GPU-bbbbbbbb-1111-2222-3333-444444444444"]
SLOT0_TOTAL = 1856 + 8 + 32  # used[0].total of slot 0
SLOT0_DATA = 1856 + 8 + 16
WRITES = 20_000


def consistent(s: RegionSnapshot) -> bool:
    return all(
        d.used_bytes == d.context_bytes + d.module_bytes + d.buffer_bytes + d.offset_bytes for d in s.devices
    )


def test_reader_never_exports_a_write_parked_mid_update() -> None:
    writer, buf = RegionWriter.in_memory("v1.2")
    writer.initialise(UUIDS[:1])
    writer.add_process(1)
    parked, release = threading.Event(), threading.Event()

    def park() -> None:
        parked.set()
        release.wait(10)

    writer.mid_write = park
    t = threading.Thread(target=writer.change_memory, args=(0, 0, MEM_DATA, 4096))
    t.start()
    try:
        assert parked.wait(10)
        # the bytes really are torn right now: total moved, data_size not yet
        assert struct.unpack_from("<Q", buf, SLOT0_TOTAL)[0] == 4096
        assert struct.unpack_from("<Q", buf, SLOT0_DATA)[0] == 0
        during = parse_region(buf, len(buf), retries=8)
        assert isinstance(during, RegionSnapshot)
        assert during.issues == (reasons.TORN_READ,) and during.processes == 0
        assert during.devices[0].used_bytes == 0
    finally:
        release.set()
        t.join(10)
    after = parse_region(buf, len(buf))
    assert isinstance(after, RegionSnapshot) and after.devices[0].used_bytes == 4096 and consistent(after)


def test_hammering_writer_never_yields_torn_values() -> None:
    writer, buf = RegionWriter.in_memory("v1.2")
    writer.initialise(UUIDS)
    writer.add_process(1)
    rng = random.Random(7)
    # hand the GIL over mid-write often, so the reader really meets odd sequences
    writer.mid_write = lambda: time.sleep(0) if rng.random() < 0.1 else None

    def hammer() -> None:
        held = [[0, 0, 0], [0, 0, 0]]
        for _ in range(WRITES):
            dev, kind = rng.randrange(2), rng.choice((MEM_CONTEXT, MEM_MODULE, MEM_DATA))
            delta = rng.randrange(1, 1 << 20)
            if held[dev][kind] >= delta and rng.random() < 0.5:
                delta = -delta
            held[dev][kind] += delta
            writer.change_memory(0, dev, kind, delta)
            time.sleep(0)

    t = threading.Thread(target=hammer)
    t.start()
    good = torn = 0
    try:
        while t.is_alive():
            s = parse_region(buf, len(buf))
            assert isinstance(s, RegionSnapshot)
            assert consistent(s), s
            if s.processes:
                good += 1
            else:
                torn += 1
                assert s.issues == (reasons.TORN_READ,)
            time.sleep(0)
    finally:
        t.join(30)
    assert good > 0, (good, torn)
