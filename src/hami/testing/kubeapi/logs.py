"""``GET pods/NAME/log``: what `kubectl logs` reads, from files standing in for the kubelet's.

The emulator has no kubelet: the log of container C of pod NS/P is the file
``<log_dir>/<NS>_<P>/<C>.log`` when the server was given a ``log_dir`` (the demo points it at the
logs of the daemons it runs in place of the pods). Checks and messages are the API server's:
an unknown container is 400, a pod with several containers needs ``container``; a container
without a file has an empty log. ``follow`` answers what there is and ends (no stream).
"""

from __future__ import annotations

from pathlib import Path

from hami.testing.kubeapi import errors
from hami.testing.kubeapi.store import Obj

MAX_BYTES = 16 << 20  # a reply is bounded whatever the file holds


def log_path(log_dir: Path, namespace: str, pod: str, container: str) -> Path:
    return log_dir / f"{namespace}_{pod}" / f"{container}.log"


def _container(pod: Obj, wanted: str) -> str:
    spec = pod.get("spec") or {}
    names = [
        str(c.get("name")) for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    ]
    name = str(pod["metadata"]["name"])
    if not wanted:
        regular = [str(c.get("name")) for c in spec.get("containers") or []]
        if len(regular) == 1:
            return regular[0]
        raise errors.bad_request(
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(regular)}]"
        )
    if wanted not in names:
        raise errors.bad_request(f"container {wanted} is not valid for pod {name}")
    return wanted


def _non_negative(query: dict[str, str], key: str) -> int | None:
    raw = query.get(key, "")
    if raw == "":
        return None
    if not raw.isdigit():
        raise errors.bad_request(f"{key}: invalid value {raw!r}: must be a non-negative integer")
    return int(raw)


def read(pod: Obj, query: dict[str, str], log_dir: Path | None) -> bytes:
    """The log text of one container of ``pod``, cut by ``tailLines`` and ``limitBytes``."""
    container = _container(pod, query.get("container", ""))
    tail, limit = _non_negative(query, "tailLines"), _non_negative(query, "limitBytes")
    if log_dir is None:
        return b""
    path = log_path(
        log_dir, str(pod["metadata"].get("namespace", "")), str(pod["metadata"]["name"]), container
    )
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - MAX_BYTES))
            data = fh.read(MAX_BYTES)
    except FileNotFoundError:
        return b""
    if tail is not None:
        lines = data.splitlines(keepends=True)
        data = b"".join(lines[-tail:]) if tail else b""
    if limit is not None:
        data = data[:limit]
    return data
