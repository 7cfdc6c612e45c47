"""The differential placement run: HAMi's scheduler extender and ours, each on its own copy of the
same cluster, get the same pods one at a time in the same order, and every answer is compared.

Each side is an API server (with the same nodes and quota) and an extender watching it. A step
deletes the pods whose lifetime ended, waits until both extenders' caches have let them go (the set
of pods in ``hami_vgpu_memory_allocated_bytes``: both export it from their live reservations), creates
the pod on both sides, and POSTs the ExtenderArgs kube-scheduler sends (``nodeCacheCapable``: the pod
and node names) to both ``/filter``s. Compared per pod: the node, ``hami.io/vgpu-devices-allocated``
(every device UUID, memory and cores per container), the filter's ``Error`` and its ``FailedNodes``;
at the end, the pod's events (type, reason, message; a FilteringSucceed's node scores as a set).

Ties: HAMi picks among nodes of equal score by goroutine timing, we pick the first listed
(docs/design/differences.md). When the nodes differ and HAMi's own FilteringSucceed event gives our
node the same score as its choice, HAMi is asked again with our node only, and the devices it
picks there are compared (counted as ``ties``). A pod on which the two still disagree is deleted on
both sides, so that later pods again meet identical clusters.

A fit is then bound through ``/bind`` (HAMi writes the devices at filter, we at bind), and what the
device plugin does at Allocate is done for it: ``bind-phase: success`` and the node lock released.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TypeVar

from hami.core import annotations as ann
from hami.core import reasons as r
from hami.testing.apiside import Obj, Side
from hami.testing.podstream import Step
from hami.testing.wait import wait_until

T = TypeVar("T")
R = TypeVar("R")
# Our events HAMi does not write, on purpose (docs/design/differences.md, rows "Extra FilteringFailed
# line", "`gpucores` above 100" and "`gpumem-percentage` above 100"): matched on the message and on the
# reason.
ADDED_REASONS = frozenset({"GPUCoresClamped", "GPUMemPercentageClamped"})


def added_event(event: tuple[str, str, str]) -> bool:
    """One of our events that HAMi does not write, on purpose: (type, reason, message)."""
    return event[1] in ADDED_REASONS or r.NODE_LIST.read(event[2]) is not None


def fit_scores(events: Iterable[tuple[str, str, str]]) -> dict[str, str]:
    for _, reason, msg in events:
        if reason == "FilteringSucceed" and (m := re.search(r"fit\((.*)\)$", msg)):
            return dict(x.rsplit(":", 1) for x in m.group(1).split(",") if ":" in x)
    return {}


@dataclass(frozen=True)
class Outcome:
    node: str  # "" when refused
    devices: str  # hami.io/vgpu-devices-allocated, "" when refused
    failed: tuple[tuple[str, str], ...]
    error: str

    @property
    def placed(self) -> bool:
        return bool(self.node)


def filtered(side: Side, pod: Obj, nodes: Sequence[str]) -> Outcome:
    """/filter: the node chosen (no devices yet) or the refusal."""
    body = side.filter(pod, nodes)
    names = body.get("NodeNames") or []
    failed = tuple(sorted((body.get("FailedNodes") or {}).items()))
    return Outcome(names[0] if names else "", "", failed, str(body.get("Error") or ""))


def bound(side: Side, pod: Obj, got: Outcome) -> Outcome:
    """For a fit: /bind, then what the device plugin does at Allocate (release the node lock,
    ``bind-phase: success``); the devices as the bound pod carries them."""
    if not got.placed:
        return got
    key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    bind_error = side.bind(pod, got.node)
    annotations = side.get(key)["metadata"].get("annotations") or {}
    side.allocated(key, got.node)
    return replace(got, devices=annotations.get(ann.POD_DEVICES_ALLOCATED, ""), error=got.error or bind_error)


def outcome(side: Side, pod: Obj, nodes: Sequence[str]) -> Outcome:
    return bound(side, pod, filtered(side, pod, nodes))


def _gpu_entries(devices: str) -> list[str]:
    return [c for c in devices.split(";") if c]


Q1 = "Empty entries for containers without GPUs (QUIRK Q1)"
QUOTA_INIT = "In-Fit quota check with init containers"


def known_difference(pod: Obj, h: Outcome, o: Outcome) -> str:
    """The row of docs/design/differences.md that explains why the answers differ, or ""."""
    gpu_init = any(
        ann.RESOURCE_GPU in ((c.get("resources") or {}).get("limits") or {})
        for c in pod["spec"].get("initContainers", [])
    )
    if gpu_init and r.RESOURCE_QUOTA_NOT_FIT in repr((h.failed, o.failed)):
        return QUOTA_INIT
    same_devices = _gpu_entries(h.devices) == _gpu_entries(o.devices)
    if replace(h, devices="") == replace(o, devices="") and same_devices:
        return Q1
    return ""


@dataclass
class Difference:
    index: int
    pod: Obj
    hami: Outcome | None
    ours: Outcome | None
    what: str = "placement"
    detail: str = ""
    known: str = ""  # the docs/design/differences.md row that explains it

    def render(self) -> str:
        spec = {
            "annotations": self.pod["metadata"].get("annotations") or {},
            "namespace": self.pod["metadata"]["namespace"],
            "containers": [c["resources"] for c in self.pod["spec"]["containers"]],
            "initContainers": [c["resources"] for c in self.pod["spec"].get("initContainers", [])],
        }
        return (
            f"#{self.index} {self.pod['metadata']['name']} ({self.what}"
            + (f"; documented: {self.known}" if self.known else "")
            + f") {json.dumps(spec, sort_keys=True)}\n"
            f"  HAMi: {self.hami}\n  ours: {self.ours}" + (f"\n  {self.detail}" if self.detail else "")
        )


@dataclass
class Report:
    pods: int = 0
    agreed: int = 0
    placed: int = 0
    refused: int = 0
    ties: int = 0
    tie_keys: set[str] = field(default_factory=set)  # asked twice: their events are not compared
    differences: list[Difference] = field(default_factory=list)
    event_differences: list[Difference] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.agreed / self.pods if self.pods else 0.0

    @property
    def unexplained(self) -> list[Difference]:
        return [d for d in (*self.differences, *self.event_differences) if not d.known]

    def summary(self, first: int = 10) -> str:
        documented = Counter(d.known for d in self.differences if d.known)
        lines = [
            f"agreement {self.agreed}/{self.pods} = {100 * self.rate:.2f} % of pods (placed {self.placed}, "
            f"refused {self.refused}; node ties broken by HAMi's own scores: {self.ties}); "
            f"differences explained by docs/design/differences.md: {dict(documented)}; "
            f"unexplained: {len(self.unexplained)} (event differences: {len(self.event_differences)})"
        ]
        unexplained = self.unexplained
        lines += [d.render() for d in unexplained[:first]]
        lines += [d.render() for d in self.differences if d.known][: max(first - len(unexplained), 2)]
        return "\n".join(lines)


def _wait_released(pool: ThreadPoolExecutor, sides: Sequence[Side], alive: set[str],
                   timeout: float = 30.0) -> None:  # fmt: skip
    def wait(side: Side, _: None) -> None:
        wait_until(lambda: side.allocated_pods() <= alive, timeout,
                   f"{side.name}'s cache to drop deleted pods", interval=0.005)  # fmt: skip

    _both(pool, wait, (sides[0], None), (sides[1], None))


def run(hami: Side, ours: Side, nodes: Sequence[str], steps: Sequence[Step]) -> Report:
    """The sides work in parallel within a step (each waits on its own servers), in step together."""
    with ThreadPoolExecutor(2, thread_name_prefix="side") as pool:
        return _run(hami, ours, nodes, steps, pool)


def _both(pool: ThreadPoolExecutor, f: Callable[[Side, T], R], h: tuple[Side, T],
          o: tuple[Side, T]) -> tuple[R, R]:  # fmt: skip
    theirs = pool.submit(f, *h)
    mine = f(*o)
    return theirs.result(), mine


def _run(hami: Side, ours: Side, nodes: Sequence[str], steps: Sequence[Step],
         pool: ThreadPoolExecutor) -> Report:  # fmt: skip
    report = Report()
    alive: set[str] = set()  # placed pods still in the clusters
    pods: dict[str, tuple[int, Obj]] = {}

    def delete(side: Side, keys: Sequence[str]) -> None:
        for key in keys:
            side.delete(key)

    for index, step in enumerate(steps):
        gone = [k for k in step.delete if k in alive]
        _both(pool, delete, (hami, step.delete), (ours, step.delete))
        if gone:
            alive.difference_update(gone)
            _wait_released(pool, (hami, ours), alive)
        meta = step.pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        pods[key] = (index, step.pod)
        hami_pod, our_pod = _both(pool, Side.create, (hami, step.pod), (ours, step.pod))
        h, o = _both(pool, lambda s, p: filtered(s, p, nodes), (hami, hami_pod), (ours, our_pod))
        report.pods += 1
        if h.placed and o.placed and h.node != o.node:
            h = _break_tie(hami, key, hami_pod, h, o)
            if h.node == o.node:
                report.ties += 1
                report.tie_keys.add(key)
        h, o = _both(pool, lambda s, a: bound(s, a[0], a[1]), (hami, (hami_pod, h)), (ours, (our_pod, o)))
        if h == o:
            report.agreed += 1
            report.placed += h.placed
            report.refused += not h.placed
            if h.placed:
                alive.add(key)
            continue
        known = known_difference(step.pod, h, o)
        report.differences.append(Difference(index, step.pod, h, o, known=known))
        if known == Q1:  # the same devices, only written differently: the clusters are still identical
            alive.add(key)
            continue
        # identical clusters again for the next pod
        _both(pool, delete, (hami, [key]), (ours, [key]))
        if h.placed or o.placed:
            _wait_released(pool, (hami, ours), alive)
    _compare_events(hami, ours, pods, report)
    return report


def _break_tie(hami: Side, key: str, pod: Obj, h: Outcome, o: Outcome) -> Outcome:
    """HAMi's answer on our node alone when its own scores rate our node as high as its choice."""
    def scores() -> dict[str, str] | None:
        return fit_scores(hami.events().get(key, Counter())) or None

    try:
        got = wait_until(scores, 5.0, f"HAMi's FilteringSucceed event of {key}", interval=0.01)
    except AssertionError:
        return h
    if got.get(h.node) is None or got.get(h.node) != got.get(o.node):
        return h
    return filtered(hami, pod, [o.node])


def _compare_events(hami: Side, ours: Side, pods: dict[str, tuple[int, Obj]], report: Report) -> None:
    """Waits until both sides' event counts stop changing, then compares them pod by pod."""
    def settled(side: Side) -> dict[str, Counter[tuple[str, str, str]]]:
        last: list[int] = [-1]

        def check() -> dict[str, Counter[tuple[str, str, str]]] | None:
            got = side.events()
            total = sum(sum(c.values()) for c in got.values())
            stable, last[0] = total == last[0], total
            return got if stable else None

        return wait_until(check, 60.0, f"{side.name}'s events to settle", interval=0.5)

    skip = {f"{d.pod['metadata']['namespace']}/{d.pod['metadata']['name']}" for d in report.differences}
    he, oe = settled(hami), settled(ours)
    for key, (index, pod) in pods.items():
        if key in skip or key in report.tie_keys:
            continue
        h = he.get(key, Counter())
        o = Counter({e: n for e, n in oe.get(key, Counter()).items() if not added_event(e)})
        if h != o:
            detail = f"events HAMi only: {dict(h - o)}; ours only: {dict(o - h)}"
            report.event_differences.append(Difference(index, pod, None, None, "events", detail))
