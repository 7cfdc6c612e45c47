"""The I/O edge of the region reader: one cache file mapped shared, checked before each access.

Only what a scrape reads is mapped: the *head* (header and the live slots ``[0, proc_num)``) and
the *tail* page(s) holding ``proc_num``, the feedback fields and ``last_kernel_time``. Mapping the
whole 2 MB file would let the kernel's fault-around map up to 64 KB of page cache around every
touched page into our RSS (about 130 KB per container); a mapping is never faulted around beyond
its own end, so two small mappings keep RSS to the few pages actually read.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct

from hami.exporter.region import reasons
from hami.exporter.region.layout import HEADER_MIN, MAX_PROCS, Layout
from hami.exporter.region.parse import RegionRejected, RegionSnapshot, detect_layout, parse_region

_I32 = struct.Struct("<i")
PAGE = mmap.ALLOCATIONGRANULARITY


def _page_ceil(n: int) -> int:
    return -(-n // PAGE) * PAGE


class MappedRegion:
    """A cache file mapped ``MAP_SHARED``; read-write when allowed, since the feedback loop writes.

    Touching a page beyond the end of a file that shrank under the mapping raises SIGBUS, which
    Python cannot catch; so every access is preceded by an ``fstat`` against the file's size at
    open. The head grows (is remapped larger) when ``proc_num`` outgrows it.
    """

    def __init__(self, path: str, fd: int, size: int, inode: int, writable: bool) -> None:
        self.path = path
        self.inode = inode
        self.writable = writable
        self._fd: int | None = fd
        self._size = size
        self._head: mmap.mmap | None = None
        self._tail: mmap.mmap | None = None
        self._tail_base = 0
        self._map_head(min(size, PAGE))

    @classmethod
    def open(cls, path: str) -> MappedRegion | RegionRejected:
        """Map ``path``; a file too small to hold the header is rejected without mapping."""
        try:
            return cls._open(path)
        except (OSError, ValueError) as err:
            return RegionRejected("skipped", reasons.OPEN_FAILED, f"{path}: {err}")

    @classmethod
    def _open(cls, path: str) -> MappedRegion | RegionRejected:
        writable = True
        try:
            fd = os.open(path, os.O_RDWR)
        except PermissionError:
            writable = False
            fd = os.open(path, os.O_RDONLY)
        try:
            st = os.fstat(fd)
            if st.st_size < HEADER_MIN:
                os.close(fd)
                return RegionRejected(
                    "skipped", reasons.FILE_TOO_SMALL, f"cache file size {st.st_size} too small"
                )
            return cls(path, fd, st.st_size, st.st_ino, writable)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise

    def _mmap(self, offset: int, length: int) -> mmap.mmap:
        assert self._fd is not None
        access = mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ
        return mmap.mmap(self._fd, length, mmap.MAP_SHARED, access=access, offset=offset)

    def _map_head(self, length: int) -> None:
        old, self._head = self._head, self._mmap(0, length)
        if old is not None:
            with contextlib.suppress(BufferError):
                old.close()

    @property
    def closed(self) -> bool:
        return self._fd is None

    @property
    def mapped_bytes(self) -> int:
        return (0 if self._head is None else len(self._head)) + (0 if self._tail is None else len(self._tail))

    def check(self) -> str | None:
        """A region-level reason if the file no longer matches the mapping, else None."""
        if self._fd is None:
            return reasons.OPEN_FAILED
        try:
            size = os.fstat(self._fd).st_size
        except OSError:
            return reasons.OPEN_FAILED
        if size < self._size:
            return reasons.TRUNCATED
        if size != self._size:
            return reasons.SIZE_CHANGED
        return None

    def layout(self) -> Layout | RegionRejected:
        """The layout, with the tail mapped and the head covering the live slots."""
        bad = self.check()
        if bad is not None:
            return RegionRejected("skipped", bad, self.path)
        assert self._head is not None
        layout = detect_layout(self._head, self._size, trust_size=True)
        if isinstance(layout, RegionRejected):
            return layout
        if self._tail is None:
            # the tail's place depends only on the layout family, fixed by the (unchanging) size
            self._tail_base = layout.off_proc_num - layout.off_proc_num % PAGE
            self._tail = self._mmap(self._tail_base, self._size - self._tail_base)
        live = _I32.unpack_from(self._tail, layout.off_proc_num - self._tail_base)[0]
        proc_num = min(max(live, 1), MAX_PROCS)
        need = layout.slot_base(proc_num)
        if len(self._head) < min(need, self._size):
            # grow with headroom so a container whose processes come and go is not remapped each time
            self._map_head(min(_page_ceil(max(need, 2 * len(self._head))), self._size))
        return layout

    def read(self) -> RegionSnapshot | RegionRejected:
        layout = self.layout()
        if isinstance(layout, RegionRejected):
            if layout.reason in (reasons.TRUNCATED, reasons.SIZE_CHANGED, reasons.OPEN_FAILED):
                return RegionRejected(
                    "skipped", layout.reason, f"{self.path}: file no longer matches its mapping"
                )
            return layout
        assert self._head is not None and self._tail is not None
        return parse_region(self._head, self._size, tail=self._tail, tail_base=self._tail_base, layout=layout)

    def view(self, offset: int, length: int) -> memoryview | None:
        """A view of ``[offset, offset + length)`` if mapped; take it only after a ``layout()``."""
        if self._head is not None and offset + length <= len(self._head):
            return memoryview(self._head)[offset : offset + length]
        if self._tail is not None and offset >= self._tail_base:
            start = offset - self._tail_base
            if start + length <= len(self._tail):
                return memoryview(self._tail)[start : start + length]
        return None

    def write_i32(self, offset: int, value: int) -> bool:
        """Store one aligned int32 (the feedback loop's writes); False if it cannot be done now."""
        if not self.writable or self.check() is not None:
            return False
        view = self.view(offset, 4)
        if view is None:
            return False
        try:
            _I32.pack_into(view, 0, value)
        finally:
            view.release()
        return True

    def close(self) -> None:
        for mm in (self._head, self._tail):
            if mm is not None:
                # a view still alive somewhere keeps the mapping until it is collected
                with contextlib.suppress(BufferError):
                    mm.close()
        self._head = self._tail = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
