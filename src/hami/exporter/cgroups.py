"""Which pod container a host process belongs to, from ``/proc/<pid>/cgroup`` (the monitor has hostPID).

The kubelet puts every container in a cgroup whose path holds the pod UID and the container ID, in
each of its layouts: cgroupfs (``/kubepods/burstable/pod<uid>/<id>``) and systemd
(``/kubepods.slice/.../kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope``), under
cgroup v1 and v2, for containerd, CRI-O and Docker.
"""

from __future__ import annotations

import os
import re

_POD = r"pod(?P<uid>[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
_CONTAINER = r"(?:(?:cri-containerd|containerd|crio|docker)-)?(?P<id>[0-9a-f]{64})(?:\.scope)?"
_PATH = re.compile(_POD + r"(?:\.slice)?/" + _CONTAINER + r"(?:/|$)")


def parse_cgroup(text: str) -> tuple[str, str] | None:
    """``(pod UID, container ID)`` from a ``/proc/<pid>/cgroup`` text, or None (not a pod container)."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        m = _PATH.search(path)
        if m:
            return m.group("uid").replace("_", "-"), m.group("id")
    return None


def container_id(status_id: str) -> str:
    """``containerd://<id>`` (a pod status's containerID) → ``<id>``."""
    return status_id.rpartition("://")[2]


def owner_of(pid: int, proc_root: str) -> tuple[str, str] | None:
    """The pod container of host process ``pid``; None when it is gone or not in a pod."""
    try:
        with open(os.path.join(proc_root, str(pid), "cgroup"), encoding="utf-8", errors="replace") as f:
            return parse_cgroup(f.read(65536))
    except OSError:
        return None
