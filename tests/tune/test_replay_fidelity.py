"""Fidelity: a snapshot replayed under its own configuration gets back the placements it recorded.

Two histories: a generated 200-node one (kube-scheduler and the extender's decisions played at
full time resolution, then kept as the API keeps them: whole seconds), and the demo cluster, where
the real extender (HTTP /filter and /bind against the API emulator) places a stream of pods and
``hami-doctor snapshot`` reads the result back through the official client. In both, at least 95 %
of pods get the same node and cards, and replaying the same snapshot with the true sub-second
order restored gets 100 %: every difference comes from the order lost within a second.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from hami.core import annotations as ann
from hami.core.snapshot import model as snap
from hami.core.snapshot import reader as snapread
from hami.core.snapshot import writer as snapwrite
from hami.doctor.capture import CaptureSettings, capture
from hami.doctor.main import main as doctor
from hami.scheduler.extender.daemon import Extender
from hami.testing import cluster
from hami.testing.builders import limits
from hami.testing.extender import bind_pod, filter_pod, running
from hami.testing.history import HistorySpec, generate
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until
from hami.tune.simulate.measures import Fidelity, fidelity, summarise
from hami.tune.simulate.replay import replay
from hami.tune.simulate.scenario import CURRENT
from hami.tune.simulate.table import fidelity_line

Times = dict[str, tuple[float, float | None, float | None]]  # uid -> exact (created, scheduled, finished)


def exact(snapshot: snap.Snapshot, times: Times) -> snap.Snapshot:
    """The snapshot with the true times restored where known (the one thing the API loses)."""
    pods = []
    for p in snapshot.pods:
        if p.uid not in times:
            pods.append(p)
            continue
        created, scheduled, finished = times[p.uid]
        kept = scheduled if p.scheduled is not None else None
        pods.append(dataclasses.replace(p, created=created, scheduled=kept, finished=finished))
    return dataclasses.replace(snapshot, pods=tuple(pods))


def check(snapshot: snap.Snapshot, times: Times) -> Fidelity:
    recorded = fidelity(replay(snapshot, CURRENT))
    assert recorded.agreement >= 0.95, recorded.differences[:5]
    restored = fidelity(replay(exact(snapshot, times), CURRENT))
    assert restored.agreement == 1.0, restored.differences[:5]
    return recorded


@pytest.fixture(scope="module")
def history() -> Iterator[tuple[snap.Snapshot, Times]]:
    # Busy enough that pods wait and the last ones never fit: the retries are exercised too.
    h = generate(HistorySpec(nodes=200, gpus=4, pods=3000, mean_gap=1.5, mean_life=8 * 3600))
    s = capture(h.nodes, h.pods, [], h.taken, CaptureSettings(scheduler=snap.Scheduler()))
    yield snapread.loads(snapwrite.dumps(s)), h.exact


def test_generated_200_node_history(history: tuple[snap.Snapshot, Times]) -> None:
    snapshot, times = history
    assert len(snapshot.nodes) == 200
    same_second = sum(1 for a, b in itertools.pairwise(snapshot.pods) if int(a.created) == int(b.created))
    assert same_second > 100, "the history should have many arrivals sharing a second"
    f = check(snapshot, times)
    summary = summarise(replay(snapshot, CURRENT))
    assert summary.waited > 0 and summary.pending_end > 0
    assert f.compared == 3000


def test_the_recorded_outcome_decides_the_order_within_a_second(history: tuple[snap.Snapshot, Times]) -> None:
    """Taking same-second arrivals by name instead loses most placements: one swapped pair on a busy
    node changes the cards of every later pod there. (This is why the replay resolves the order.)"""
    snapshot, _ = history
    by_name = [
        uid for p in sorted(snapshot.pods, key=lambda p: (p.created, p.namespace, p.name)) for uid in [p.uid]
    ]
    naive = fidelity(replay(snapshot, CURRENT, order=by_name))
    assert naive.agreement < 0.9


# --- the demo cluster through the real extender --------------------------------------------------


class Driver:
    """kube-scheduler and the node side around the extender: filter and bind each pod when it
    arrives, release the node lock as Allocate would, finish pods, and retry waiting pods in
    arrival order after every finish. Records the true time of everything."""

    def __init__(self, api: KubeAPIServer, ext: Extender) -> None:
        self.api, self.ext = api, ext
        self.nodes = [n["metadata"]["name"] for n in api.store.list("nodes")]
        self.waiting: list[dict[str, Any]] = []
        self.running: list[dict[str, Any]] = []
        self.times: Times = {}
        self.http = requests.Session()

    def _patch(self, path: str, body: dict[str, Any]) -> None:
        r = self.http.patch(
            self.api.url + path,
            json=body,
            headers={"Content-Type": "application/merge-patch+json"},
            timeout=10,
        )
        assert r.status_code == 200, r.text

    def schedule(self, pod: dict[str, Any]) -> bool:
        # A pod's true arrival is its first filter: the replay filters a pod the moment it arrives.
        uid, asked = pod["metadata"]["uid"], time.time()
        arrived = self.times.setdefault(uid, (asked, None, None))[0]
        reply = filter_pod(self.ext, pod, self.nodes)
        chosen = reply.get("NodeNames") or []
        if not chosen:
            return False
        assert bind_pod(self.ext, pod, chosen[0]) == ""
        self.times[uid] = (arrived, asked, None)
        # The device plugin's Allocate releases the lock; the next bind there needs the extender to see it.
        self._patch(f"/api/v1/nodes/{chosen[0]}", {"metadata": {"annotations": {ann.NODE_LOCK: None}}})
        wait_until(
            lambda: (
                ann.NODE_LOCK
                not in (self.ext.state.get_node(chosen[0]) or {})["metadata"].get("annotations", {})
            ),
            what="lock released in the extender's cache",
        )
        self.running.append(pod)
        return True

    def arrive(self, pod: dict[str, Any]) -> None:
        stored = self.api.store.put(pod)
        ns, name = stored["metadata"]["namespace"], stored["metadata"]["name"]
        wait_until(lambda: self.ext.state.get_pod(ns, name), what=f"pod {name} in the extender's cache")
        if not self.schedule(stored):
            self.waiting.append(stored)

    def finish(self, pod: dict[str, Any]) -> None:
        at = time.time()
        meta = pod["metadata"]
        stamp = datetime.fromtimestamp(int(at), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {
            "phase": "Succeeded",
            "containerStatuses": [
                {"name": "main", "state": {"terminated": {"exitCode": 0, "finishedAt": stamp}}}
            ],
        }
        self._patch(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status", {"status": status})
        created, scheduled, _ = self.times[meta["uid"]]
        self.times[meta["uid"]] = (created, scheduled, at)
        wait_until(lambda: self.ext.state.usage.get(meta["uid"]) is None, what="usage released")
        self.running.remove(pod)
        # kube-scheduler retries unschedulable pods when a pod goes away.
        self.waiting = [p for p in self.waiting if not self.schedule(p)]


def workload(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    pods = []
    for i in range(n):
        mem = rng.choice((2048, 4096, 8192, 8192, 12288, 16384))
        cores = rng.choice((0, 10, 20, 30, 50))
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"job-{i:03d}", "namespace": rng.choice(("ml-train", "ml-infer"))},
                "spec": {
                    "schedulerName": cluster.SCHEDULER_NAME,
                    "containers": [
                        {"name": "main", "image": "x", "resources": {"limits": limits(1, mem, cores)}}
                    ],
                },
                "status": {"phase": "Pending"},
            }
        )
    return pods


@pytest.mark.slow
def test_demo_cluster_through_the_real_extender(
    kube_api: KubeAPIServer, kube_config_file: Path, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    for obj in cluster.objects(gpus=4, now=now, scenarios=True):
        kube_api.store.put(obj)
    rng = random.Random(7)
    with running(kube_api) as ext:
        driver = Driver(kube_api, ext)
        seeded = [p for p in kube_api.store.list("pods") if not p["spec"].get("nodeName")]
        for pod in seeded:  # the demo's pending scenarios, first
            if not driver.schedule(pod):
                driver.waiting.append(pod)
        for pod in workload(48, seed=3):
            driver.arrive(pod)
            if driver.running and rng.random() < 0.35:
                driver.finish(driver.running[rng.randrange(len(driver.running))])
            time.sleep(rng.choice((0.05, 0.2, 0.5)))  # a busy cluster: two or three events a second
        assert driver.waiting, "the workload should overflow the demo cluster at some point"
    out = tmp_path / "demo.json"
    code = doctor(
        [
            "snapshot",
            "-o",
            str(out),
            "--kubeconfig",
            str(kube_config_file),
            "--node-scheduler-policy",
            "binpack",
            "--gpu-scheduler-policy",
            "spread",
        ]
    )
    assert code == 0
    snapshot = snapread.load_snapshot(out)
    scheduled = [p for p in snapshot.pods if p.scheduled is not None]
    assert len(scheduled) >= 25
    f = check(snapshot, driver.times)
    # The demo's seeded pods were placed by hand: they hold their cards and are not compared.
    fixed = [p for p in snapshot.pods if p.allocation is not None and p.scheduled is None]
    # and the over-limit, idle, unlimited, leaking and shim-underreports scenarios, and the fragmented
    # node's pods (the driver-limited one is scheduled, onto driver-node, and compared)
    assert len(fixed) == len(cluster.POD_SPECS) + 5 + len(cluster.FRAG_PODS)
    assert f.compared == len(snapshot.pods) - len(fixed)
    assert json.loads(out.read_text(encoding="utf-8"))["kind"] == snap.KIND


# --- many pods in one second: the order their events record --------------------------------------


def test_twenty_pods_a_second_replay_in_the_order_their_events_record() -> None:
    """A saturated cluster taking about twenty pods a second: nearly every pod shares its second with
    others, and taken in another order (by name) many land elsewhere. The extender's events date each
    pod's first filter to the nanosecond (``hami.doctor.snapshot_events``): with them the replay is
    identical, pod for pod."""
    h = generate(HistorySpec(nodes=8, gpus=4, pods=400, mean_gap=0.05, mean_life=60, min_life=2))
    s = capture(h.nodes, h.pods, [], h.taken, CaptureSettings(scheduler=snap.Scheduler()), events=h.events)
    snapshot = snapread.loads(snapwrite.dumps(s))
    assert all(p.first_attempt is not None for p in snapshot.pods)
    same_second = sum(1 for a, b in itertools.pairwise(snapshot.pods) if int(a.created) == int(b.created))
    assert same_second > 350
    f = fidelity(replay(snapshot, CURRENT))
    assert (f.same, f.compared) == (400, 400), f.differences[:5]
    by_name = [p.uid for p in sorted(snapshot.pods, key=lambda p: (p.created, p.namespace, p.name))]
    assert fidelity(replay(snapshot, CURRENT, order=by_name)).agreement < 0.9
    summary = summarise(replay(snapshot, CURRENT))
    assert summary.waited > 0, "the cluster should be full enough that pods wait and are retried"


def test_placements_after_a_deleted_pod_took_cards_are_not_compared() -> None:
    """Pods deleted before an API snapshot leave no trace of their cards, only their events. The
    placements decided before the first of them replay identically and are compared; the later ones,
    decided while cards the snapshot cannot show were held, are replayed but not compared, and the
    report says why instead of a figure it could not measure."""
    h = generate(HistorySpec(nodes=8, gpus=4, pods=200, mean_gap=0.1, mean_life=60, min_life=2))
    deleted = {p["metadata"]["uid"] for p in h.pods[120:125]}
    kept = [p for p in h.pods if p["metadata"]["uid"] not in deleted]
    s = capture(h.nodes, kept, [], h.taken, CaptureSettings(scheduler=snap.Scheduler()), events=h.events)
    snapshot = snapread.loads(snapwrite.dumps(s))
    first_gone = min(t for uid in deleted if (t := h.exact[uid][1]) is not None)
    assert snapshot.gone_since == pytest.approx(first_gone, abs=1e-5)
    f = fidelity(replay(snapshot, CURRENT))
    later = [p for p in snapshot.pods if (p.scheduled or snapshot.taken) >= int(first_gone)]
    assert f.not_compared == len(later) > 0
    assert f.compared == len(snapshot.pods) - len(later) > 100
    assert f.same == f.compared, f.differences[:5]
    assert any("5 GPU pod(s) placed since" in note for note in snapshot.notes)
    assert f"{f.not_compared} not compared" in fidelity_line(f)
    nothing = fidelity(replay(dataclasses.replace(snapshot, gone_since=snapshot.start), CURRENT))
    assert nothing.compared == 0
    assert fidelity_line(nothing).startswith("fidelity: not measured")
