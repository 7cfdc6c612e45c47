"""Pure parsing of one shared region from buffers: copies of the file in production, a live
(concurrently written) buffer in tests.

Reads only the header and the live slots ``[0, proc_num)``, with ``struct.unpack_from`` on the
buffer, so a scrape copies a few KB per container instead of 2 MB. A slot is accepted only when
its v1.2 seqlock is even and unchanged across the read, and its pid too (§A.6): on one live
buffer the guard words are read before and after the slot; on copies, from a copy taken before
and one taken after the copy the slot is read from.

Section signs (§) refer to docs/design/node-agent-region.md.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal

from hami.exporter.region import reasons
from hami.exporter.region.layout import (
    HEADER_MIN,
    INTERIM_V11_FILE_SIZE,
    LAYOUTS,
    MAGIC,
    MAX_DEVICES,
    MAX_PROCS,
    UUID_EXPORT_LEN,
    UUID_LEN,
    V0,
    V1_1,
    V1_2,
    Layout,
)

SEQ_RETRIES: Final = 64
_SPIN: Final = 4  # attempts before yielding the CPU (and the GIL) to a writer mid-update
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# What a region can be parsed from: file copies in production, buffers in tests and fuzzing.
Buffer = bytes | bytearray | memoryview
# Three fresh copies (before, data, after) of the part of the head that holds slot ``i``.
Reread = Callable[[int], tuple[Buffer, Buffer, Buffer] | None]


@dataclass(frozen=True)
class DeviceUsage:
    """One device of one container, summed over its live process slots."""

    index: int  # vdevice_index: the in-container (NVML) index
    uuid: str  # first 40 characters, NULs stripped
    limit_bytes: int  # 0 = unlimited
    sm_limit_percent: int  # 0..100 (a 0 in the region means unlimited and reads as 100)
    used_bytes: int  # Σ used[i].total, clamped to the limit
    context_bytes: int
    module_bytes: int
    buffer_bytes: int  # data_size; HAMi calls it buffer
    offset_bytes: int
    sm_util_percent: int  # Σ device_util[i].sm_util, clamped to 100
    # Σ used > limit > 0, used_bytes clamped. A flag, not the excess: an underflowed (wrapped) u64
    # sum also lands here, and its "excess" would be garbage.
    over_limit: bool = False
    sm_util_sum: int = 0  # Σ device_util[i].sm_util as HAMi exports it: may exceed 100


@dataclass(frozen=True)
class RegionSnapshot:
    version: str
    devices: tuple[DeviceUsage, ...]
    processes: int  # live slots read consistently
    priority: int
    recent_kernel: int
    utilization_switch: int
    last_kernel_time: int  # unix seconds; 0 for v0 (no such field)
    issues: tuple[str, ...]  # slot/device-level skips and clamps met on this read


@dataclass(frozen=True)
class RegionRejected:
    state: Literal["initialising", "skipped"]
    reason: str  # one of ``reasons``; "" while initialising
    detail: str


def detect_layout(buf: Buffer, size: int, trust_size: bool = False) -> Layout | RegionRejected:
    """Pick the layout as HAMi's monitor does: v0 by size window, v1 by size and major == 1.

    ``buf`` holds at least the header; ``size`` is the file's, capped at ``len(buf)`` unless
    ``trust_size`` (a mapping of the head alone).
    """
    view = memoryview(buf)
    avail = size if trust_size else min(size, len(view))
    if avail < HEADER_MIN or len(view) < HEADER_MIN:
        return RegionRejected("skipped", reasons.FILE_TOO_SMALL, f"cache file size {avail} too small")
    magic = _I32.unpack_from(view, 0)[0]
    if magic == 0:
        return RegionRejected("initialising", "", "cache file magic flag not yet set")
    if magic != MAGIC:
        return RegionRejected("skipped", reasons.BAD_MAGIC, f"cache file magic flag {magic} not matched")
    major, minor = struct.unpack_from("<II", view, 4)
    if V0.region_size <= avail < V1_1.region_size:
        return V0
    if avail >= V1_1.region_size:
        if major != 1:
            detail = f"unknown cache file size {avail} version {major}.{minor}"
            return RegionRejected("skipped", reasons.UNKNOWN_VERSION, detail)
        if minor == 1 and avail == INTERIM_V11_FILE_SIZE:
            return RegionRejected("skipped", reasons.INTERIM_LAYOUT, "shifted 2026 layout labelled 1.1")
        return V1_2 if minor >= 2 else V1_1
    if avail == 804_681:  # v0-initial: no device_util, never supported by HAMi
        return RegionRejected("skipped", reasons.UNKNOWN_VERSION, "v0-initial layout (804681 bytes)")
    return RegionRejected("skipped", reasons.BAD_SIZE, f"unknown cache file size {avail}")


@lru_cache(maxsize=64)
def _mem_struct(stride: int, n: int) -> struct.Struct:
    # context, module, data, offset, total (+ v1 padding) per device
    return struct.Struct("<" + ("5Q" + "x" * (stride - 40)) * n)


@lru_cache(maxsize=64)
def _util_struct(stride: int, n: int) -> struct.Struct:
    return struct.Struct("<" + ("16xQ" + "x" * (stride - 24)) * n)


@lru_cache(maxsize=4096)
def decode_uuid(raw: bytes) -> str | None:
    """The exported UUID, or None if it is not valid UTF-8 / printable (raw[0] != 0 assumed)."""
    try:
        text = raw.split(b"\0", 1)[0].decode("utf-8")
    except UnicodeDecodeError:
        return None
    text = text[:UUID_EXPORT_LEN]
    return text if text.isprintable() and text.strip() == text and text else None


def _backoff(attempt: int) -> None:
    if attempt >= _SPIN:
        time.sleep(0 if attempt < 16 else 1e-5)


def read_slot(
    view: memoryview,
    layout: Layout,
    index: int,
    n: int,
    retries: int = SEQ_RETRIES,
    *,
    before: Buffer | None = None,
    after: Buffer | None = None,
    reread: Reread | None = None,
) -> tuple[tuple[int, ...], tuple[int, ...]] | str:
    """(used fields, sm_util per device) of one live slot, or a slot-level reason.

    A read is accepted only when the seqlock (v1.2) is even and unchanged across it and the pid is
    unchanged too, so neither a concurrent update nor a compaction move can leak a torn value. The
    guard words come from ``before`` and ``after`` when given (copies taken around the copy in
    ``view``), else from ``view`` itself before and after the fields; a failed attempt asks
    ``reread`` for fresh copies, if there is one.
    """
    base = layout.slot_base(index)
    seq_off = None if layout.slot_off_seqlock is None else base + layout.slot_off_seqlock
    mem = _mem_struct(layout.mem_stride, n)
    util = _util_struct(layout.util_stride, n)
    first = view if before is None else before
    last = view if after is None else after
    for attempt in range(retries):
        s1 = 0 if seq_off is None else _U64.unpack_from(first, seq_off)[0]
        pid = _I32.unpack_from(first, base)[0]
        if not s1 & 1:
            status = _I32.unpack_from(view, base + layout.slot_off_status)[0]
            used = mem.unpack_from(view, base + layout.slot_off_used)
            sm = util.unpack_from(view, base + layout.slot_off_device_util)
            s2 = 0 if seq_off is None else _U64.unpack_from(last, seq_off)[0]
            if s1 == s2 and pid == _I32.unpack_from(view, base)[0] == _I32.unpack_from(last, base)[0]:
                if pid == 0 or status == 0:
                    return reasons.DEAD_SLOT
                return used, sm
        _backoff(attempt)
        if reread is not None:
            fresh = reread(index)
            if fresh is None:  # the file shrank under us: the slot is gone
                return reasons.TORN_READ
            first, data, last = fresh
            view = memoryview(data)
    return reasons.TORN_READ


_BY_NAME: Final = {layout.name: layout for layout in LAYOUTS}


@lru_cache(maxsize=256)
def _spans(name: str, n: int, live: int) -> tuple[slice, ...]:
    layout = _BY_NAME[name]  # keyed by name: a Layout's hash is a 30-field tuple's
    spans = [
        slice(0, HEADER_MIN),  # magic, major, minor: the layout (with the size)
        slice(layout.off_device_num, layout.off_device_num + 8),
        slice(layout.off_uuids, layout.off_uuids + UUID_LEN * n),
        slice(layout.off_limit, layout.off_limit + 8 * n),
        slice(layout.off_sm_limit, layout.off_sm_limit + 8 * n),
    ]
    for i in range(live):
        base = layout.slot_base(i)
        util = base + layout.slot_off_device_util
        spans += [
            slice(base, base + layout.slot_off_used + layout.mem_stride * n),  # pid, hostpid, used
            slice(util, util + layout.util_stride * n),
            slice(base + layout.slot_off_status, base + layout.slot_size),  # status, seqlock (v1.2)
        ]
    return tuple(spans)


def parsed_bytes(head: bytes, layout: Layout, live: int) -> bytes:
    """The bytes of ``head`` that ``parse_region`` reads for ``live`` slots (it reads the tail
    whole): two heads with equal parsed bytes (and equal tails) parse the same. Any field
    ``parse_region`` comes to read must be covered here."""
    n = min(_U64.unpack_from(head, layout.off_device_num)[0], MAX_DEVICES)
    return b"".join([head[s] for s in _spans(layout.name, n, live)])


def parse_region(
    buf: Buffer,
    size: int,
    retries: int = SEQ_RETRIES,
    *,
    tail: Buffer | None = None,
    tail_base: int = 0,
    layout: Layout | None = None,
    before: Buffer | None = None,
    after: Buffer | None = None,
    reread: Reread | None = None,
) -> RegionSnapshot | RegionRejected:
    """Parse the region in ``buf``, of which ``size`` bytes are known to be backed by the file.

    With ``tail``, ``buf`` holds only the head (header and slots) and ``tail`` the file from
    ``tail_base`` on (``proc_num`` and the fields after it). Slots past the head's end are left
    for the next read: they were added after the caller sized the head from ``proc_num``.
    ``layout``, when given, is the caller's ``detect_layout`` of this same buffer and size.
    ``before``, ``after`` and ``reread`` are the guard copies of ``read_slot``.
    """
    if layout is None:
        detected = detect_layout(buf, size, trust_size=tail is not None)
        if isinstance(detected, RegionRejected):
            return detected
        layout = detected
    view = memoryview(buf)
    back = view if tail is None else memoryview(tail)
    device_num = _U64.unpack_from(view, layout.off_device_num)[0]
    if device_num > MAX_DEVICES:
        return RegionRejected(
            "skipped", reasons.DEVICE_COUNT_OUT_OF_RANGE, f"device_num {device_num} > {MAX_DEVICES}"
        )
    n = int(device_num)
    issues: list[str] = []
    proc_num = _I32.unpack_from(back, layout.off_proc_num - tail_base)[0]
    if not 0 <= proc_num <= MAX_PROCS:
        issues.append(reasons.PROC_NUM_OUT_OF_RANGE)
        proc_num = min(max(proc_num, 0), MAX_PROCS)
    if tail is not None:
        proc_num = min(proc_num, (len(view) - layout.off_procs) // layout.slot_size)
    sums = [0] * (5 * n)
    sm = [0] * n
    processes = 0
    for i in range(proc_num):
        slot = read_slot(view, layout, i, n, retries, before=before, after=after, reread=reread)
        if isinstance(slot, str):
            issues.append(slot)
            continue
        processes += 1
        used, util = slot
        for k, value in enumerate(used):
            sums[k] += value
        for k, value in enumerate(util):
            sm[k] += value
    limits = struct.unpack_from(f"<{n}Q", view, layout.off_limit)
    sm_limits = struct.unpack_from(f"<{n}Q", view, layout.off_sm_limit)
    devices = []
    for d in range(n):
        uuid_off = layout.off_uuids + UUID_LEN * d
        if view[uuid_off] == 0:
            issues.append(reasons.UUID_UNINITIALISED)
            continue
        uuid = decode_uuid(bytes(view[uuid_off : uuid_off + UUID_LEN]))
        if uuid is None:
            issues.append(reasons.BAD_UUID)
            continue
        context, module, data, offset, total = sums[5 * d : 5 * d + 5]
        limit = limits[d]
        over = 0 < limit < total
        if over:
            issues.append(reasons.USAGE_OVER_LIMIT)
            total = limit
        util_sum = sm[d]
        if util_sum > 100:
            issues.append(reasons.SM_UTIL_OVER_100)
        sm_limit = sm_limits[d]
        if sm_limit > 100:
            issues.append(reasons.SM_LIMIT_OUT_OF_RANGE)
        devices.append(
            DeviceUsage(
                index=d,
                uuid=uuid,
                limit_bytes=limit,
                sm_limit_percent=100 if sm_limit == 0 or sm_limit > 100 else sm_limit,
                used_bytes=total,
                context_bytes=context,
                module_bytes=module,
                buffer_bytes=data,
                offset_bytes=offset,
                sm_util_percent=min(util_sum, 100),
                over_limit=over,
                sm_util_sum=util_sum,
            )
        )
    lkt_off = layout.off_last_kernel_time
    lkt = 0 if lkt_off is None else _U64.unpack_from(back, lkt_off - tail_base)[0]
    return RegionSnapshot(
        version=layout.name,
        devices=tuple(devices),
        processes=processes,
        priority=_I32.unpack_from(back, layout.off_priority - tail_base)[0],
        recent_kernel=_I32.unpack_from(back, layout.off_recent_kernel - tail_base)[0],
        utilization_switch=_I32.unpack_from(back, layout.off_utilization_switch - tail_base)[0],
        last_kernel_time=lkt,
        issues=tuple(issues),
    )
