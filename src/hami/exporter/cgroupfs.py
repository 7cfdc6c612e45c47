"""Each pod container's cgroup v2 directory and its ``dmem`` files, read from the host's cgroup root.

The kubelet's layouts are the ones ``hami.exporter.cgroups`` knows from ``/proc/<pid>/cgroup``: the same
pattern, matched against directory paths under ``kubepods*`` at the root, gives (pod UID, container
ID) for each container cgroup, whether or not a process of it runs on a GPU. The tree belongs to the
host, but its container directories are named by a runtime a tenant can influence, so nothing in it
is followed: directories are opened by descriptor with ``O_NOFOLLOW``, a symlink is refused (it could
point anywhere, ``cgroup_outside_root``), and a path component that is empty, ``.`` or ``..`` is never
joined (``under_root``). A cgroup removed while it is read (its container exited) is
``cgroup_vanished``; a malformed ``dmem`` line is ``dmem_malformed``, and the other lines are kept.
None of these hides another container.

Section signs (§) refer to docs/design/node-agent.md (§B.6).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from hami.exporter.cgroups import parse_cgroup
from hami.exporter.dmem import DmemFile, parse_dmem
from hami.exporter.region import reasons

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
_FILE = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
_MAX_DEPTH = 5  # kubepods.slice/<qos>.slice/<pod>.slice/<container>.scope is 4 deep; cgroupfs is 4 too
_MAX_FILE = 64 << 10  # one line per region: a few hundred bytes on any real node
_VANISHED = (errno.ENOENT, errno.ENODEV, errno.ESTALE)
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
    dmem: dict[str, DmemFile] | None = None  # "current"/"min"/"max"; None: not read (no controller)


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


def scan(
    root: str, with_dmem: bool, on_error: Callable[[str, OSError], None] = lambda rel, err: None
) -> CgroupScan:
    """Every pod container cgroup under ``root``'s ``kubepods*`` trees, with its dmem files when
    ``with_dmem``. A root that cannot be opened gives an empty scan (``dmem_absent`` says why);
    ``on_error`` hears of any other failure, which skips that directory alone."""
    walker = _Walker(root, with_dmem, on_error)
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
    def __init__(self, root: str, with_dmem: bool, on_error: Callable[[str, OSError], None]) -> None:
        self.root = root
        self.with_dmem = with_dmem
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
                if err.errno == errno.ELOOP:  # replaced by a symlink since the listing
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
                    self.container(cfd, child, owner)
            finally:
                os.close(cfd)

    def container(self, fd: int, rel: str, owner: tuple[str, str]) -> None:
        path = under_root(self.root, rel)
        if path is None:  # a listing never yields such a name; refused all the same
            self.refuse(rel, reasons.CGROUP_OUTSIDE_ROOT)
            return
        dmem: dict[str, DmemFile] | None = None
        if self.with_dmem:
            try:
                dmem, vanished = read_dmem(fd)
            except OSError as err:
                self.on_error(rel, err)
                return
            if vanished:
                self.refuse(rel, reasons.CGROUP_VANISHED)
                return
            if any(f.malformed for f in dmem.values()):
                self.refuse(rel, reasons.DMEM_MALFORMED)
        self.out.containers.append(ContainerCgroup(owner[0], owner[1], path, dmem))
