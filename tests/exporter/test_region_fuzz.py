"""Property test of the parser: corrupted regions never raise and never yield out-of-range values.

CI runs a bounded number of examples; ``HAMI_FUZZ_EXAMPLES=100000`` (with pytest's ``--timeout=0``)
runs the long mode.
"""

import os
from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.exporter.region import reasons
from hami.exporter.region.layout import MAX_DEVICES, MAX_PROCS, UUID_EXPORT_LEN
from hami.exporter.region.parse import RegionRejected, RegionSnapshot, parse_region
from hami.testing.regions import MEM_CONTEXT, MEM_DATA, RegionWriter

EXAMPLES = int(os.environ.get("HAMI_FUZZ_EXAMPLES", "300"))
VERSIONS = ("v0", "v1.1", "v1.2")


@cache
def seed_region(version: str) -> bytes:
    writer, buf = RegionWriter.in_memory(version)
    writer.initialise(
        ["GPU-aaaaaaaa-1111-2222-3333-444444444444", "GPU-bbbbbbbb-1111-2222-3333-444444444444", ""],
        limits=[1 << 30, 0, 5], sm_limits=[30, 100, 0], device_num=3,
    )
    for pid in (10, 11, 12):
        slot = writer.add_process(pid)
        writer.change_memory(slot, 0, MEM_DATA, 1 << 20)
        writer.change_memory(slot, 1, MEM_CONTEXT, 1 << 10)
        writer.set_sm_util(slot, 0, 30)
    writer.exit_process(1)
    return bytes(buf)


def interesting_offset(size: int) -> st.SearchStrategy[int]:
    head = st.integers(0, min(size, 1856 + 4 * 1960) - 1)  # header and the first slots
    tail = st.integers(max(0, size - 80), size - 1)  # proc_num, switch, priority, last_kernel_time
    return st.one_of(head, tail, st.integers(0, size - 1))


@st.composite
def corrupted(draw: st.DrawFn) -> tuple[bytes, int]:
    base = seed_region(draw(st.sampled_from(VERSIONS)))
    buf = bytearray(base)
    for _ in range(draw(st.integers(0, 12))):
        off = draw(interesting_offset(len(buf)))
        patch = draw(st.one_of(
            st.binary(min_size=1, max_size=16),
            st.sampled_from([b"\xff" * 8, b"\x00" * 8, b"\x01", b"\x11\x00\x00\x00", b"\x4e\xf7\x2f\x01"]),
        ))
        buf[off:off + len(patch)] = patch[: len(buf) - off]
    cut = draw(st.one_of(st.just(len(buf)), st.integers(0, len(buf))))
    return bytes(buf[:cut]), draw(st.one_of(st.just(cut), st.integers(0, cut)))


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(corrupted())
def test_parser_never_raises_and_bounds_every_value(case: tuple[bytes, int]) -> None:
    buf, size = case
    out = parse_region(buf, size, retries=3)
    if isinstance(out, RegionRejected):
        assert (out.state == "initialising" and out.reason == "") or out.reason in reasons.ALL
        return
    assert isinstance(out, RegionSnapshot)
    assert 0 <= out.processes <= MAX_PROCS and len(out.devices) <= MAX_DEVICES
    assert set(out.issues) <= set(reasons.ALL)
    for dev in out.devices:
        assert 0 < len(dev.uuid) <= UUID_EXPORT_LEN and dev.uuid.isprintable()
        assert 0 <= dev.sm_util_percent <= 100 and 1 <= dev.sm_limit_percent <= 100
        assert dev.limit_bytes == 0 or dev.used_bytes <= dev.limit_bytes
        assert dev.used_bytes >= 0


def test_unpatched_seed_regions_parse_cleanly() -> None:
    for version in VERSIONS:
        out = parse_region(seed_region(version), len(seed_region(version)))
        assert isinstance(out, RegionSnapshot) and out.processes == 2 and out.issues == (
            reasons.DEAD_SLOT, reasons.UUID_UNINITIALISED)
