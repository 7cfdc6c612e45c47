"""Each pod container's cgroup v2 directory and its ``dmem`` files, read from the host's cgroup root.

The kubelet's layouts are the ones ``hami.exporter.cgroups`` knows from ``/proc/<pid>/cgroup``: the same
pattern, matched against directory paths under ``kubepods*`` at the root, gives (pod UID, container
ID) for each container cgroup, whether or not a process of it runs on a GPU. The tree belongs to the
host, but its container directories are named by a runtime a tenant can influence, so nothing in it
is followed: directories are opened by descriptor with ``O_NOFOLLOW``, a symlink is refused (it could
point anywhere, ``cgroup_outside_root``), and a path component that is empty, ``.`` or ``..`` is never
joined (``under_root``). A cgroup removed while it is read (its container exited) is
``cgroup_vanished``; a malformed ``dmem`` line is ``dmem_malformed``, and the other lines are kept.
None of these hides another container. The walk is kept between scrapes (``CgroupIndex``); a
container's directory is opened again, component by component, for each read.

Section signs (§) refer to docs/design/node-agent-monitor.md (§B.6).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from hami.exporter.cgroups import parse_cgroup
from hami.exporter.dmem import DmemFile, parse_dmem
from hami.exporter.region import reasons

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
_FILE = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
_MAX_DEPTH = 5  # kubepods.slice/<qos>.slice/<pod>.slice/<container>.scope is 4 deep; cgroupfs is 4 too
_MAX_FILE = 64 << 10  # one line per region: a few hundred bytes on any real node
_VANISHED = (errno.ENOENT, errno.ENODEV, errno.ESTALE)
# what opening a symlink (or a ``..``) with O_NOFOLLOW | O_DIRECTORY answers: Linux says ENOTDIR or ELOOP
_LINK = (errno.ELOOP, errno.ENOTDIR, errno.EXDEV)
DMEM_FILES = ("current", "min", "max")

# Why the dmem source is absent on this node (hami_monitor_driver_source_available{reason}).
NO_CGROUP_ROOT = "no_cgroup_root"
CGROUP_V1 = "cgroup_v1"
NO_DMEM_CONTROLLER = "no_dmem_controller"


@dataclass(frozen=True)
class ContainerCgroup:
    pod_uid: str
    container_id: str
    path: str  # the directory's full path under the cgroup root, as NVML names a cgroup
    rel: str  # the path relative to the root


@dataclass
class CgroupScan:
    containers: list[ContainerCgroup] = field(default_factory=list)
    refused: dict[str, frozenset[str]] = field(default_factory=dict)  # relative path -> reasons met


def under_root(root: str, rel: str) -> str | None:
    """``root/rel`` when every component of ``rel`` is a plain name; None for ``..``, ``.``, an empty
    component or an absolute path (a path that could leave the root is never joined)."""
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") for p in parts):
        return None
    return os.path.join(root, *parts)


def dmem_absent(root: str) -> str | None:
    """Why the kernel gives no dmem accounting under ``root``, or None when it does."""
    try:
        with open(os.path.join(root, "cgroup.controllers"), encoding="ascii", errors="replace") as f:
            controllers = f.read(4096).split()
    except FileNotFoundError:
        return CGROUP_V1 if os.path.isdir(root) else NO_CGROUP_ROOT
    except OSError:
        return NO_CGROUP_ROOT
    if "dmem" not in controllers or not os.path.exists(os.path.join(root, "dmem.capacity")):
        return NO_DMEM_CONTROLLER
    return None


def read_small(name: str, dir_fd: int) -> str:
    """A pseudo-file of a cgroup directory, never following a symlink nor blocking on a FIFO."""
    fd = os.open(name, _FILE, dir_fd=dir_fd)
    try:
        return os.read(fd, _MAX_FILE).decode("ascii", errors="replace")
    finally:
        os.close(fd)


def read_dmem(dir_fd: int) -> tuple[dict[str, DmemFile], bool]:
    """The container's dmem files (a file the controller lacks reads empty), and whether the cgroup
    vanished while they were read (``OSError`` other than that propagates)."""
    out: dict[str, DmemFile] = {}
    for kind in DMEM_FILES:
        try:
            out[kind] = parse_dmem(read_small(f"dmem.{kind}", dir_fd))
        except OSError as err:
            if err.errno == errno.ENODEV or (err.errno == errno.ENOENT and _gone(dir_fd)):
                return out, True
            if err.errno != errno.ENOENT:
                raise
            out[kind] = DmemFile()
    return out, False


def _gone(dir_fd: int) -> bool:
    """Whether the directory behind ``dir_fd`` was removed (its link count drops to 0): a file missing
    from a live cgroup is a controller not enabled there, one missing from a removed cgroup is not."""
    try:
        return os.fstat(dir_fd).st_nlink == 0
    except OSError:
        return True


def scan(root: str, on_error: Callable[[str, OSError], None] = lambda rel, err: None) -> CgroupScan:
    """Every pod container cgroup under ``root``'s ``kubepods*`` trees. A root that cannot be opened
    gives an empty scan (``dmem_absent`` says why); ``on_error`` hears of any other failure, which
    skips that directory alone."""
    walker = _Walker(root, on_error)
    try:
        fd = os.open(root, _DIR)
    except OSError as err:
        on_error("", err)
        return walker.out
    try:
        walker.walk(fd, "", 0)
    finally:
        os.close(fd)
    return walker.out


class _Walker:
    def __init__(self, root: str, on_error: Callable[[str, OSError], None]) -> None:
        self.root = root
        self.on_error = on_error
        self.out = CgroupScan()

    def refuse(self, rel: str, reason: str) -> None:
        self.out.refused[rel] = self.out.refused.get(rel, frozenset()) | {reason}

    def walk(self, fd: int, rel: str, depth: int) -> None:
        try:
            with os.scandir(fd) as it:
                entries = [(e.name, e.is_symlink(), e.is_dir(follow_symlinks=False)) for e in it]
        except OSError as err:
            if err.errno in _VANISHED:
                self.refuse(rel, reasons.CGROUP_VANISHED)
            else:
                self.on_error(rel, err)
            return
        for name, link, is_dir in sorted(entries):
            if depth == 0 and not name.startswith("kubepods"):
                continue
            child = f"{rel}/{name}" if rel else name
            if link:
                self.refuse(child, reasons.CGROUP_OUTSIDE_ROOT)
                continue
            owner = parse_cgroup("0::/" + child) if is_dir else None
            if not is_dir or (owner is None and depth + 1 >= _MAX_DEPTH):
                continue
            try:
                cfd = os.open(name, _DIR, dir_fd=fd)
            except OSError as err:
                if err.errno in _LINK:  # replaced by a symlink since the listing
                    self.refuse(child, reasons.CGROUP_OUTSIDE_ROOT)
                elif err.errno in _VANISHED:
                    self.refuse(child, reasons.CGROUP_VANISHED)
                else:
                    self.on_error(child, err)
                continue
            try:
                if owner is None:
                    self.walk(cfd, child, depth + 1)
                else:
                    self.container(child, owner)
            finally:
                os.close(cfd)

    def container(self, rel: str, owner: tuple[str, str]) -> None:
        path = under_root(self.root, rel)
        if path is None:  # a listing never yields such a name; refused all the same
            self.refuse(rel, reasons.CGROUP_OUTSIDE_ROOT)
            return
        self.out.containers.append(ContainerCgroup(owner[0], owner[1], path, rel))


def open_under(root_fd: int, rel: str) -> int:
    """The directory ``rel`` under ``root_fd``, opened one component at a time without following a
    symlink (``ELOOP``/``ENOTDIR``) nor a ``..`` (``EXDEV``)."""
    if under_root("/", rel) is None:
        raise OSError(errno.EXDEV, f"not a plain path under the root: {rel!r}")
    fd = os.dup(root_fd)
    try:
        for part in rel.split("/"):
            nxt = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


Key = tuple[str, str]  # (pod UID, container ID)
REWALK_S = 60.0  # the walk's age at which it is done again, to drop the cgroups of exited containers
MISS_REWALK_S = 5.0  # how soon a container the index does not know yet makes it walk again


class CgroupIndex:
    """The container cgroups under the root, kept between scrapes: a walk costs a directory listing
    per pod and QoS slice, so it runs again only when a container is asked for that it does not know
    (at most every ``miss_rewalk_s``), or when the last walk is ``rewalk_s`` old. A container's
    directory, once opened (component by component, never following a link), stays open until it
    leaves the index: its files are read through that descriptor, and a directory swapped for a
    symlink later is not the one read. What a walk refused stays reported until the next walk."""

    def __init__(
        self,
        root: str,
        *,
        rewalk_s: float = REWALK_S,
        miss_rewalk_s: float = MISS_REWALK_S,
        clock: Callable[[], float] = time.monotonic,
        on_error: Callable[[str, OSError], None] = lambda rel, err: None,
    ) -> None:
        self.root = root
        self._rewalk_s, self._miss_rewalk_s = rewalk_s, miss_rewalk_s
        self._clock = clock
        self._on_error = on_error
        self._known: dict[Key, ContainerCgroup] = {}
        self._fds: dict[Key, int] = {}
        self._refused: dict[str, frozenset[str]] = {}
        self._walked: float | None = None

    def lookup(self, wanted: Collection[Key]) -> tuple[dict[Key, ContainerCgroup], dict[str, frozenset[str]]]:
        """The cgroups of ``wanted`` that exist, and what the last walk refused."""
        now = self._clock()
        age = None if self._walked is None else now - self._walked
        missing = any(k not in self._known for k in wanted)
        if age is None or age >= self._rewalk_s or (missing and age >= self._miss_rewalk_s):
            found = scan(self.root, self._on_error)
            known = {(c.pod_uid, c.container_id): c for c in found.containers}
            for key in [k for k, cg in self._known.items() if known.get(k) != cg]:
                self.forget(self._known[key])
            self._known, self._refused, self._walked = known, found.refused, now
        return {k: self._known[k] for k in wanted if k in self._known}, dict(self._refused)

    def read_dmem(self, cg: ContainerCgroup) -> tuple[dict[str, DmemFile] | None, str | None]:
        """The container's dmem files, or None and why it was refused (it then leaves the index)."""
        key = (cg.pod_uid, cg.container_id)
        fd = self._fds.get(key)
        if fd is None:
            try:
                root_fd = os.open(self.root, _DIR)
            except OSError as err:
                self._on_error("", err)
                return None, None
            try:
                fd = self._fds[key] = open_under(root_fd, cg.rel)
            except OSError as err:
                return None, self._refuse(cg, err)
            finally:
                os.close(root_fd)
        try:
            dmem, vanished = read_dmem(fd)
        except OSError as err:
            self._on_error(cg.rel, err)
            return None, None
        if vanished:
            self.forget(cg)
            return None, reasons.CGROUP_VANISHED
        return dmem, reasons.DMEM_MALFORMED if any(f.malformed for f in dmem.values()) else None

    def _refuse(self, cg: ContainerCgroup, err: OSError) -> str | None:
        if err.errno in _VANISHED or err.errno in _LINK:
            self.forget(cg)
        if err.errno in _VANISHED:
            return reasons.CGROUP_VANISHED
        if err.errno in _LINK:  # swapped for a symlink since the walk
            return reasons.CGROUP_OUTSIDE_ROOT
        self._on_error(cg.rel, err)
        return None

    def forget(self, cg: ContainerCgroup) -> None:
        """A cgroup that is gone (or NVML no longer finds): walk again before it is asked for."""
        key = (cg.pod_uid, cg.container_id)
        self._known.pop(key, None)
        fd = self._fds.pop(key, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for cg in list(self._known.values()):
            self.forget(cg)
