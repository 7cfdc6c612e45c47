"""``--fix``: apply the guides' remedies the findings offer, after confirmation.

Each remedy removes one node annotation (a stale, dangling or malformed node lock — the device-plugin guide's
``kubectl annotate node <node> hami.io/mutex.lock-`` — or a handshake the scheduler will not refresh)
with a JSON merge patch carrying the node's resourceVersion, and only if the annotation still has
the value that was diagnosed: a lock taken in between is never removed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hami.core.kube import errors
from hami.core.kube.patches import patch_node_annotations
from hami.core.objects import annotations_of, resource_version
from hami.doctor.fetch import get_node
from hami.doctor.findings import Remedy, Section


def remedies(sections: list[Section]) -> list[Remedy]:
    seen: dict[tuple[str, str], Remedy] = {}
    for s in sections:
        for f in s.findings:
            if f.remedy is not None:
                seen.setdefault((f.remedy.node, f.remedy.annotation), f.remedy)
    return list(seen.values())


def apply(api: Any, todo: list[Remedy]) -> list[str]:
    """Apply each remedy once; return one line per remedy saying what happened."""
    out: list[str] = []
    for r in todo:
        try:
            node = get_node(api, r.node)
            current = annotations_of(node).get(r.annotation)
            if current != r.expected:
                out.append(f"skipped {r.node} {r.annotation}: changed since the diagnosis ({current!r})")
                continue
            rv = resource_version(node)
            patch_node_annotations(api, r.node, {r.annotation: None}, resource_version=rv)
            out.append(f"removed {r.annotation} from {r.node}")
        except errors.Conflict:
            out.append(f"skipped {r.node} {r.annotation}: the node changed during the fix (409)")
        except errors.ApiError as exc:
            out.append(f"failed {r.node} {r.annotation}: {exc}")
    return out


def confirm(todo: list[Remedy], ask: Callable[[str], str]) -> bool:
    prompt = "\n".join(f"  - {r.description}" for r in todo)
    answer = ask(f"hami-doctor will make {len(todo)} change(s):\n{prompt}\nProceed? [y/N] ")
    return answer.strip().lower() in ("y", "yes")
