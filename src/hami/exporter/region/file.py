"""The I/O edge of the region reader: one cache file, opened safely and read by copies.

The file sits in a directory that the tenant's container can write, so it is untrusted in every
way: it may be truncated, grown, replaced, or swapped for a symlink, a FIFO or a device node at any
moment, and nothing it does may crash, block or mislead the monitor. Hence:

- it is opened relative to its container directory's descriptor, first as an ``O_PATH`` handle
  that does not follow a symlink and has no side effect on a FIFO or a device; that handle's
  ``fstat`` must show a regular file, which is then reopened through ``/proc/self/fd`` (the very
  inode the handle holds, not the name again, so a swap in between changes nothing);
- every read is a ``pread`` copy of the few KB a scrape needs (header, live slots, tail). A shared
  mapping would be cheaper, but touching it past the end of a file that shrank raises SIGBUS,
  which Python cannot catch, and checking the size first is a race. A short read means the file
  shrank: the region is skipped for that scrape (``truncated``);
- the copies are taken on every scrape (tenants write in place, so size, mtime and inode say
  nothing), but a region whose copies equal, in every byte the parse reads (``parsed_bytes``), the
  ones its last clean snapshot was parsed from is not parsed again: that snapshot is what a parse
  would return;
- the feedback loop writes through the same descriptor (``pwrite``), never through a name.
"""

from __future__ import annotations

import os
import stat
import struct
from typing import Final, NamedTuple

from hami.exporter.region import reasons
from hami.exporter.region.layout import HEADER_MIN, LAYOUTS, MAX_PROCS, V0, V1_1, Layout
from hami.exporter.region.parse import (
    Buffer,
    RegionRejected,
    RegionSnapshot,
    detect_layout,
    parse_region,
    parsed_bytes,
)

_I32 = struct.Struct("<i")
# No symlink followed, and no open() side effect: a FIFO would block, a device might act.
_HANDLE_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_REOPEN_FLAGS = os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _tail_end(layout: Layout) -> int:
    """The end of the last field a scrape reads after ``proc_num``."""
    if layout.off_last_kernel_time is not None:
        return layout.off_last_kernel_time + 8
    return layout.off_priority + 4


# What a scrape copies from ``proc_num`` on, by layout.
_TAIL_LEN: Final = {layout.name: _tail_end(layout) - layout.off_proc_num for layout in LAYOUTS}
# The largest parsed-bytes key a region keeps between scrapes. A few devices and processes take a
# few hundred bytes; a tenant's 16 devices and 1,024 slots would take 1.8 MB per region, for good:
# such a region is parsed on every read instead, as it would be without the key.
_KEEP_MAX: Final = 8 << 10


class _Parsed(NamedTuple):
    """What a clean snapshot was parsed from: equal copies give the same snapshot again."""

    key: bytes  # ``parsed_bytes`` of the head: a few hundred bytes, not the head's kilobytes
    tail: bytes
    layout: Layout
    snapshot: RegionSnapshot


class RegionFile:
    """One region file held open; ``read()`` copies what a scrape needs and parses the copies."""

    def __init__(self, path: str, fd: int, size: int, inode: int, writable: bool) -> None:
        self.path = path
        self.inode = inode
        self.size = size
        self.writable = writable
        self._fd: int | None = fd
        # How much of the head (header + live slots) the last scrape copied: the next one's first
        # guess. Slot offsets depend only on the layout family, fixed by the (unchanging) size.
        self._family = V0 if size < V1_1.region_size else V1_1
        self._head_len = min(size, self._family.slot_base(1))
        self._last: _Parsed | None = None

    @classmethod
    def open(cls, dir_fd: int, name: str, path: str) -> RegionFile | RegionRejected:
        """Open ``name`` in the directory ``dir_fd`` (``path`` is for messages) or say why not."""
        try:
            handle = os.open(name, _HANDLE_FLAGS, dir_fd=dir_fd)
        except OSError as err:
            return RegionRejected("skipped", reasons.OPEN_FAILED, f"{path}: {err.strerror}")
        try:
            st = os.fstat(handle)
            if stat.S_ISLNK(st.st_mode):
                return RegionRejected("skipped", reasons.SYMLINK, f"{path}: a symlink, not followed")
            if not stat.S_ISREG(st.st_mode):
                return RegionRejected("skipped", reasons.NOT_REGULAR_FILE, f"{path}: not a regular file")
            if st.st_size < HEADER_MIN:
                return RegionRejected(
                    "skipped", reasons.FILE_TOO_SMALL, f"cache file size {st.st_size} too small"
                )
            proc = f"/proc/self/fd/{handle}"
            writable = True
            try:
                fd = os.open(proc, os.O_RDWR | _REOPEN_FLAGS)
            except PermissionError:  # a file HAMi-core made read-only: readable, no feedback
                writable = False
                fd = os.open(proc, os.O_RDONLY | _REOPEN_FLAGS)
        except OSError as err:
            return RegionRejected("skipped", reasons.OPEN_FAILED, f"{path}: {err.strerror}")
        finally:
            os.close(handle)
        return cls(path, fd, st.st_size, st.st_ino, writable)

    @property
    def closed(self) -> bool:
        return self._fd is None

    def copy(self, offset: int, length: int) -> bytes | None:
        """``length`` bytes from ``offset``, or None if the file no longer holds them all."""
        if self._fd is None:
            return None
        try:
            data = os.pread(self._fd, length, offset)
        except OSError:
            return None
        return data if len(data) == length else None

    def changed(self) -> bool:
        """Resized since it was opened (or unreadable): the caller opens it again."""
        if self._fd is None:
            return True
        try:
            return os.fstat(self._fd).st_size != self.size
        except OSError:
            return True

    def layout(self) -> Layout | RegionRejected:
        """The layout, from a fresh copy of the header."""
        header = self.copy(0, HEADER_MIN)
        if header is None:
            return RegionRejected("skipped", reasons.TRUNCATED, f"{self.path}: file shrank")
        return detect_layout(header, self.size, trust_size=True)

    def read(self) -> RegionSnapshot | RegionRejected:
        """The region now: always four fresh copies (tenants write it in place); parsed again only
        when they differ from the ones the last clean snapshot came from."""
        # The hot path of every scrape: four preads, checked inline.
        fd, head_len, last = self._fd, self._head_len, self._last
        try:
            if fd is None:
                raise OSError("closed")
            # the head as the last scrape sized it; also the "before" copy of the slot guards
            before = os.pread(fd, head_len, 0)
            if len(before) != head_len:
                raise OSError("short read")
            if last is not None and before[:HEADER_MIN] == last.key[:HEADER_MIN]:
                layout = last.layout  # the same magic and version, the same size
            else:
                detected = detect_layout(before, self.size, trust_size=True)
                if isinstance(detected, RegionRejected):
                    return detected
                layout = detected
            base = layout.off_proc_num
            tail_len = _TAIL_LEN[layout.name]
            tail = os.pread(fd, tail_len, base)
            if len(tail) != tail_len:
                raise OSError("short read")
            live = min(max(_I32.unpack_from(tail, 0)[0], 0), MAX_PROCS)
            self._head_len = need = min(layout.slot_base(live), self.size)
            if live == 0:  # no slot, no guard needed
                data = after = before
            else:
                if need > head_len:
                    before = os.pread(fd, need, 0)
                data = os.pread(fd, need, 0)
                after = os.pread(fd, need, 0)
                if len(before) < need or len(data) != need or len(after) != need:
                    raise OSError("short read")
        except OSError:
            return RegionRejected("skipped", reasons.TRUNCATED, f"{self.path}: file shrank")
        # Three equal copies: every slot reads on its first attempt, from these bytes alone.
        steady = before == data == after
        key = parsed_bytes(data, layout, live) if steady else b""
        if steady and last is not None and tail == last.tail and key == last.key:
            return last.snapshot
        snap = parse_region(
            data, self.size, tail=tail, tail_base=base, layout=layout,
            before=before, after=after, reread=self._reread,
        )
        # Only a snapshot that is a function of ``data`` and ``tail`` alone is kept: no reread, no issue.
        if steady and isinstance(snap, RegionSnapshot) and not snap.issues and len(key) <= _KEEP_MAX:
            self._last = _Parsed(key, tail, layout, snap)
        else:
            self._last = None
        return snap

    def _reread(self, index: int) -> tuple[Buffer, Buffer, Buffer] | None:
        """Fresh before/data/after copies of the head up to slot ``index`` (after a torn read)."""
        end = min(self._family.slot_base(index + 1), self.size)
        before, data, after = (self.copy(0, end) for _ in range(3))
        if before is None or data is None or after is None:
            return None
        return before, data, after

    def write_i32(self, offset: int, value: int) -> bool:
        """Store one aligned int32 (the feedback loop's writes); False if it cannot be done now.

        Only inside the file as opened: a file that shrank is not grown back by our write.
        """
        if not self.writable or self._fd is None or not 0 <= offset <= self.size - 4 or self.changed():
            return False
        try:
            return os.pwrite(self._fd, _I32.pack(value), offset) == 4
        except OSError:
            return False

    def close(self) -> None:
        self._last = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
