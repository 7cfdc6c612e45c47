"""Discovery of per-container cache dirs under ``$HOOK_PATH/containers`` and their GC (§A.7–§A.8).

One directory per container, named ``<podUID>_<containerName>``, holding the region file
(``<uuid>.cache``), the ``libvgpu.so`` bind target and possibly stale or unrelated files. The
container writes that directory, so nothing in it is trusted: it is opened by descriptor without
following a symlink, and so is the region file in it (``region.file``).

Section signs (§) refer to docs/design/node-agent-region.md.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from hami.core import klog
from hami.exporter.region.file import RegionFile
from hami.exporter.region.parse import RegionRejected

log = klog.get_logger(__name__)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def parse_dir_name(name: str) -> tuple[str, str] | None:
    """``<podUID>_<container>`` split at the first ``_``; None if either part is empty."""
    uid, sep, ctr = name.partition("_")
    if not sep or not uid or not ctr:
        return None
    return uid, ctr


@dataclass(frozen=True)
class FileEntry:
    name: str
    mtime: float  # of the entry itself (lstat): a symlink's own
    is_dir: bool  # not following a symlink


def pick_cache_file(entries: Iterable[FileEntry]) -> str | None:
    """The region file of a dir: the newest ``*.cache`` entry (``libvgpu.so`` excluded).

    HAMi gives up on a dir with more than two such entries ("cache num not matched"); a stale file
    left by an earlier allocation must not hide the live one, so the most recently written wins.
    A directory is never a candidate; a symlink, FIFO or device is, so that opening it is refused
    and counted as a skip (the container can only hide its own region that way).
    """
    caches = [e for e in entries if not e.is_dir and e.name.endswith(".cache") and "libvgpu.so" not in e.name]
    if not caches:
        return None
    return max(caches, key=lambda e: (e.mtime, e.name)).name


def is_expired(dir_mtime: float, now: float, resync_s: float) -> bool:
    """GC grace: a dir of an unknown pod survives one resync interval (the pod may be new)."""
    return dir_mtime + resync_s <= now


@dataclass
class Container:
    dirname: str
    pod_uid: str
    name: str
    cache_path: str | None = None
    region: RegionFile | None = None
    open_error: RegionRejected | None = None


@dataclass
class UpdateResult:
    loaded: int = 0
    removed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # region-level reasons met while opening


class ContainerLister:
    """The set of container dirs and their open region files, refreshed by ``update()``.

    ``lock`` is held for a whole update and a whole scrape, so nothing is closed mid-read.
    """

    def __init__(
        self, hook_path: str, resync_s: float = 300.0, clock: Callable[[], float] | None = None
    ) -> None:
        self.containers_path = os.path.join(hook_path, "containers")
        self.resync_s = resync_s
        self.lock = threading.RLock()
        self._clock = clock or time.time
        self._containers: dict[str, Container] = {}

    def containers(self) -> list[Container]:
        with self.lock:
            return list(self._containers.values())

    def update(self, pod_uids: set[str] | None) -> UpdateResult:
        """Rescan; ``pod_uids`` is None until the pod informer has synced (then nothing is GC'd)."""
        with self.lock:
            return self._update(pod_uids)

    def _update(self, pod_uids: set[str] | None) -> UpdateResult:
        result = UpdateResult()
        now = self._clock()
        seen: set[str] = set()
        parent = os.open(self.containers_path, _DIR_FLAGS)
        try:
            with os.scandir(parent) as it:
                dirs = [e for e in it if e.is_dir(follow_symlinks=False)]
            for entry in dirs:
                parsed = parse_dir_name(entry.name)
                if parsed is None:
                    log.warning("Skipping dir with unexpected name format: %s", entry.name)
                    continue
                uid, ctr = parsed
                if pod_uids is not None and uid not in pod_uids and self._gc(entry, now, result):
                    continue
                seen.add(entry.name)
                self._refresh(parent, entry.name, uid, ctr, result)
        finally:
            os.close(parent)
        for gone in set(self._containers) - seen:
            self._drop(gone)
        result.loaded = sum(1 for c in self._containers.values() if c.region is not None)
        return result

    def _gc(self, entry: os.DirEntry[str], now: float, result: UpdateResult) -> bool:
        try:
            mtime = entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            return False
        if not is_expired(mtime, now, self.resync_s):
            return False
        path = os.path.join(self.containers_path, entry.name)
        log.info("Removing dirname %s in monitorpath", path)
        self._drop(entry.name)
        # rmtree removes by descriptor and never follows a symlink the container left inside
        shutil.rmtree(path, ignore_errors=True)
        result.removed.append(entry.name)
        return True

    def _refresh(self, parent: int, dirname: str, uid: str, ctr: str, result: UpdateResult) -> None:
        c = self._containers.get(dirname)
        if c is None:
            c = self._containers[dirname] = Container(dirname, uid, ctr)
        path = os.path.join(self.containers_path, dirname)
        try:
            dir_fd = os.open(dirname, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
        except OSError as err:
            log.warning("Failed to load cache: %s, error: %s", path, err)
            return
        try:
            self._load(c, dir_fd, path, result)
        finally:
            os.close(dir_fd)

    def _load(self, c: Container, dir_fd: int, path: str, result: UpdateResult) -> None:
        try:
            with os.scandir(dir_fd) as it:
                files = [
                    FileEntry(e.name, e.stat(follow_symlinks=False).st_mtime, e.is_dir(follow_symlinks=False))
                    for e in it
                ]
        except OSError as err:
            log.warning("Failed to load cache: %s, error: %s", path, err)
            return
        name = pick_cache_file(files)
        cache_path = None if name is None else os.path.join(path, name)
        if (
            name is not None
            and c.region is not None
            and cache_path == c.cache_path
            and self._still_valid(c.region, dir_fd, name)
        ):
            return
        log.v(4).info("Checking path %s", path)
        self._unmap(c)
        c.cache_path = cache_path
        if name is None or cache_path is None:
            log.v(4).info("No cache file in %s", path)
            return
        opened = RegionFile.open(dir_fd, name, cache_path)
        if isinstance(opened, RegionRejected):
            c.open_error = opened
            result.errors.append(opened.reason)
            log.warning("Failed to load cache: %s, error: %s", path, opened.detail)
            return
        c.region = opened
        log.info("Adding ctr dirname %s in monitorpath", path)

    @staticmethod
    def _still_valid(region: RegionFile, dir_fd: int, name: str) -> bool:
        """Reopen when the file was replaced (another inode, or now a symlink) or resized."""
        if region.changed():
            return False
        try:
            return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_ino == region.inode
        except OSError:
            return False

    def _unmap(self, c: Container) -> None:
        if c.region is not None:
            c.region.close()
        c.region = None
        c.open_error = None

    def _drop(self, dirname: str) -> None:
        c = self._containers.pop(dirname, None)
        if c is not None:
            self._unmap(c)

    def close(self) -> None:
        with self.lock:
            for name in list(self._containers):
                self._drop(name)
