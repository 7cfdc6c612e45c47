"""The I/O edge of the region reader: one cache file mapped shared, checked before each access."""

from __future__ import annotations

import contextlib
import mmap
import os
import struct

from hami.exporter.region import reasons
from hami.exporter.region.layout import HEADER_MIN, Layout
from hami.exporter.region.parse import RegionRejected, RegionSnapshot, detect_layout, parse_region

_I32 = struct.Struct("<i")


class MappedRegion:
    """A cache file mapped ``MAP_SHARED``; read-write when allowed, since the feedback loop writes.

    Touching a page beyond the end of a file that shrank under the mapping raises SIGBUS, which
    Python cannot catch; so every access is preceded by an ``fstat`` against the mapped length.
    """

    def __init__(self, path: str, mm: mmap.mmap, inode: int, writable: bool) -> None:
        self.path = path
        self.inode = inode
        self.writable = writable
        self._mm: mmap.mmap | None = mm
        self._length = len(mm)

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
                return RegionRejected(
                    "skipped", reasons.FILE_TOO_SMALL, f"cache file size {st.st_size} too small"
                )
            access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
            # mmap keeps its own duplicate of the descriptor; ours is closed below.
            mm = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED, access=access)
        finally:
            os.close(fd)
        return cls(path, mm, st.st_ino, writable)

    @property
    def closed(self) -> bool:
        return self._mm is None

    def check(self) -> str | None:
        """A region-level reason if the file no longer matches the mapping, else None."""
        if self._mm is None:
            return reasons.OPEN_FAILED
        try:
            size = self._mm.size()
        except OSError:
            return reasons.OPEN_FAILED
        if size < self._length:
            return reasons.TRUNCATED
        if size != self._length:
            return reasons.SIZE_CHANGED
        return None

    def read(self) -> RegionSnapshot | RegionRejected:
        bad = self.check()
        if bad is not None:
            return RegionRejected("skipped", bad, f"{self.path}: file no longer matches its mapping")
        assert self._mm is not None
        return parse_region(self._mm, self._length)

    def layout(self) -> Layout | RegionRejected:
        bad = self.check()
        if bad is not None:
            return RegionRejected("skipped", bad, self.path)
        assert self._mm is not None
        return detect_layout(self._mm, self._length)

    def buffer(self) -> memoryview:
        """A view of the mapping; take it only right after a successful ``check``."""
        assert self._mm is not None
        return memoryview(self._mm)

    def write_i32(self, offset: int, value: int) -> bool:
        """Store one aligned int32 (the feedback loop's writes); False if it cannot be done now."""
        if not self.writable or self._mm is None or self.check() is not None:
            return False
        _I32.pack_into(self._mm, offset, value)
        return True

    def close(self) -> None:
        if self._mm is not None:
            # a view still alive somewhere keeps the mapping until it is collected
            with contextlib.suppress(BufferError):
                self._mm.close()
            self._mm = None
