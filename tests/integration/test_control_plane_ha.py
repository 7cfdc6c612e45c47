"""The extender's concurrency promises on the real control plane (``hami.testing.controlplane``):
leader election on a real Lease (c), the node lock under the real server's optimistic concurrency
(d), and an extender restart between a pod's filter and its bind (f). Each test has nodes and pods
of its own (``dedicated``), so the chart's scheduler and the other tests never touch them."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from hami.core import names
from hami.core.kube.client import new_api_client
from hami.core.kube.options import KubeOptions
from hami.testing.controlplane import ControlPlane
from hami.testing.controlplane.allocation import Allocations
from hami.testing.controlplane.dedicated import (
    NAMESPACE,
    cards_of,
    create,
    dedicated_node,
    dedicated_pod,
    pods,
    remove,
)
from hami.testing.controlplane.deploy import Hami
from hami.testing.controlplane.replicas import (
    Replica,
    grant_lease,
    kill,
    start_extender,
    start_replica,
    uts_problem,
)
from hami.testing.wait import wait_until

# bounded waits of a few minutes each on a loaded 2-core machine, beyond the default 300 s
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
Obj = dict[str, Any]
WAIT_S = 180.0  # every bounded wait: generous for a loaded 2-core machine
CARD_MIB = 8000


def require(problem: str | None) -> None:
    """A missing capability: a failure in CI (CI=true), a skip saying why elsewhere."""
    if problem is None:
        return
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(problem, pytrace=False)
    pytest.skip(problem)


def admin_client(cp: ControlPlane) -> Any:
    return new_api_client(KubeOptions(kubeconfig=str(cp.kubeconfig), qps=-1, timeout=30.0))


def lease_holder(cp: ControlPlane, name: str) -> Obj | None:
    with cp.session() as s:
        reply = s.get(f"{cp.url}/apis/coordination.k8s.io/v1/namespaces/{names.NAMESPACE}/leases/{name}",
                      timeout=30)  # fmt: skip
    return reply.json() if reply.status_code == 200 else None


def node_of(cp: ControlPlane, name: str) -> str:
    with cp.session() as s:
        reply = s.get(f"{cp.url}/api/v1/namespaces/{NAMESPACE}/pods/{name}", timeout=30)
    reply.raise_for_status()
    return str(reply.json()["spec"].get("nodeName") or "")


@pytest.fixture
def owned(hami: Hami, request: pytest.FixtureRequest) -> Iterator[str]:
    """An owner name for this test's nodes and pods; they are deleted afterwards."""
    owner = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    yield owner
    remove(hami.cp, owner)


# ---- c: leader election ----

LEASE = "hami-ha"
HA_SCHEDULER = "hami-ha"


def leading(replicas: list[Replica]) -> list[str]:
    return [r.name for r in replicas if r.metric("hami_scheduler_is_leader") == 1.0]


def test_two_replicas_elect_a_leader_on_a_real_lease_and_the_other_takes_over(hami: Hami, owned: str) -> None:
    """Two replicas of the chart's scheduler pod (extender + kube-scheduler, each with its pod's
    hostname): kube-scheduler's real leader election picks one; exactly that replica's extender
    leads and binds. SIGKILL both of its processes: the other kube-scheduler takes the Lease once
    it has run out, and its extender leads within the lease duration (plus kube-scheduler's retry
    period, the interval at which a candidate tries) and binds the next pod."""
    require(uts_problem())
    cp = hami.cp
    dedicated_node(cp, f"{owned}-gpu", owner=owned, cards=2)
    grant_lease(hami, LEASE)
    with Allocations(admin_client(cp), nodes={f"{owned}-gpu"}):  # releases each bind's node lock
        replicas = [start_replica(hami, f"hami-scheduler-{x}", scheduler_name=HA_SCHEDULER, lease=LEASE)
                    for x in ("a", "b")]  # fmt: skip
        try:

            def one_leader() -> tuple[Replica, Replica] | None:
                lease = lease_holder(cp, LEASE)
                holder = str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")
                if leading(replicas) != [r.name for r in replicas if holder.startswith(r.name + "_")]:
                    return None
                (leader,) = [r for r in replicas if holder.startswith(r.name + "_")]
                (other,) = [r for r in replicas if r is not leader]
                return leader, other

            leader, other = wait_until(
                one_leader, WAIT_S, "one replica leading, as the Lease says", interval=0.5
            )
            create(cp, dedicated_pod(f"{owned}-1", owner=owned, mem=1000, scheduler=HA_SCHEDULER))
            wait_until(lambda: node_of(cp, f"{owned}-1"), WAIT_S, "the first pod bound", interval=0.5)
            assert other.metric("hami_scheduler_bind_duration_seconds_count") == 0.0
            spec = (lease_holder(cp, LEASE) or {})["spec"]
            duration = float(spec["leaseDurationSeconds"])

            killed = time.monotonic()
            kill(cp, leader.kube_scheduler)
            kill(cp, leader.extender)
            wait_until(lambda: leading([other]), WAIT_S, f"{other.name} leading", interval=0.2)
            took = time.monotonic() - killed
            holder = (lease_holder(cp, LEASE) or {})["spec"]["holderIdentity"]
            assert holder.startswith(other.name + "_")
            # kube-scheduler's defaults: a candidate retries every 2 s, jittered by client-go's
            # leaderelection.JitterFactor 1.2 (up to 4.4 s apart); 5 s for a loaded machine
            assert took <= duration + 2.0 * (1 + 1.2) + 5.0, f"took {took:.1f} s over a {duration:g} s lease"

            create(cp, dedicated_pod(f"{owned}-2", owner=owned, mem=1000, scheduler=HA_SCHEDULER))
            wait_until(lambda: node_of(cp, f"{owned}-2"), WAIT_S, "the second pod bound", interval=0.5)
            assert (other.metric("hami_scheduler_bind_duration_seconds_count") or 0.0) >= 1.0
        finally:
            for r in replicas:
                kill(cp, r.kube_scheduler)
                kill(cp, r.extender)


# ---- d: fifty concurrent binds on one node ----


def metric_sum(text: str, pattern: str) -> float:
    return sum(float(m) for m in re.findall(pattern + r" (\S+)$", text, re.MULTILINE))


def test_fifty_concurrent_pods_on_one_node_never_share_a_card(hami: Hami, owned: str) -> None:
    """Fifty pods, each asking for a whole card, created at once for the chart's scheduler onto one
    node of eight cards. kube-scheduler filters them one by one and binds in parallel; the extender's
    binds race for the node lock (a merge patch carrying the node's resourceVersion: the real server
    answers 409 to all but one) while the device plugin's stand-in releases it after each pod.
    Exactly eight pods are bound, on eight different cards; the other 42 stay Pending, each refused
    by a filter."""
    cp = hami.cp
    node = f"{owned}-gpu"
    dedicated_node(cp, node, owner=owned, cards=8, mem=CARD_MIB)
    metrics = hami.metrics_url + "/metrics"
    with Allocations(admin_client(cp), nodes={node}) as done:
        batch = [dedicated_pod(f"{owned}-{i:02d}", owner=owned, mem=CARD_MIB,
                               scheduler=names.SCHEDULER_DEPLOYMENT) for i in range(50)]  # fmt: skip
        with ThreadPoolExecutor(max_workers=50) as pool:
            list(pool.map(lambda p: create(cp, p), batch))

        def eight_allocated() -> bool:
            return done.count >= 8

        wait_until(eight_allocated, WAIT_S, "eight pods bound and allocated", interval=0.5)
        pending = [p["metadata"]["name"] for p in pods(cp, owned) if not p["spec"].get("nodeName")]

        def all_refused() -> bool:
            return all(any(r == "FilteringFailed" for r, _ in events_of(cp, name)) for name in pending)

        # each of them was filtered, and refused, at least once
        wait_until(all_refused, WAIT_S, "a FilteringFailed event for each pending pod", interval=1.0)
        assert not done.errors
    everything = pods(cp, owned)
    bound = {p["metadata"]["name"]: cards_of(p) for p in everything if p["spec"].get("nodeName")}
    assert len(everything) == 50
    assert len(bound) == 8, sorted(bound)
    cards = [card for got in bound.values() for card in got]
    assert sorted(cards) == [f"GPU-{node}-{i}" for i in range(8)], bound
    text = requests.get(metrics, timeout=30).text
    conflicts = metric_sum(text, r'^rest_client_requests_total\{[^}]*code="409"[^}]*\}')
    failed = metric_sum(text, r'^hami_scheduler_bind_duration_seconds_count\{result="error"\}')
    # what the race cost, for the failure message of the assertion below (not a target)
    assert len(set(cards)) == 8, f"409s {conflicts}, failed binds {failed}"


# ---- f: an extender restart between filter and bind ----

MANUAL = "hami-manual"  # no kube-scheduler has this profile: the test calls /filter and /bind itself


class SchedulerCalls:
    """kube-scheduler's calls to an extender: over mutual TLS with the chart's client certificate."""

    def __init__(self, hami: Hami, replica: Replica) -> None:
        client = hami.files.mounts["/client-tls"]
        self.session = requests.Session()
        self.session.trust_env = False  # REQUESTS_CA_BUNDLE would replace the CA below
        self.session.cert = (str(client / "tls.crt"), str(client / "tls.key"))
        self.session.verify = str(hami.files.ca)
        self.replica = replica

    def filter(self, pod: Obj, nodes: list[str]) -> Obj:
        reply = self.session.post(self.replica.url + "/filter", json={"Pod": pod, "NodeNames": nodes},
                                  timeout=60)  # fmt: skip
        assert reply.status_code == 200, reply.text
        body: Obj = reply.json()
        return body

    def bind(self, pod: Obj, node: str) -> str:
        meta = pod["metadata"]
        args = {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": node,
        }
        reply = self.session.post(self.replica.url + "/bind", json=args, timeout=60)
        assert reply.status_code == 200, reply.text
        return str(reply.json()["Error"])


def events_of(cp: ControlPlane, pod: str) -> list[tuple[str, str]]:
    with cp.session() as s:
        reply = s.get(f"{cp.url}/api/v1/namespaces/{NAMESPACE}/events",
                      params={"fieldSelector": f"involvedObject.name={pod}"}, timeout=30)  # fmt: skip
    reply.raise_for_status()
    return [(e["reason"], e["message"]) for e in reply.json()["items"]]


def test_an_extender_restart_between_filter_and_bind_never_allocates_a_card_twice(
    hami: Hami, owned: str
) -> None:
    """The extender keeps a filter's reservation in memory until the bind. Restarted in between,
    it refuses the bind with a message that says kube-scheduler will filter again (and a
    BindingFailed event); the pod filtered again gets a correct allocation. When another pod took
    the reserved card meanwhile, the late bind is refused and the pod finds no room: no card is
    ever given to two pods."""
    cp = hami.cp
    node = f"{owned}-gpu"
    dedicated_node(cp, node, owner=owned, cards=2, mem=CARD_MIB)

    def restart(replica: Replica) -> Replica:
        cp.stop_child(replica.extender)
        return start_extender(hami, f"{owned}-extender", "--leader-elect=false", ports=replica.ports)

    def new_pod(name: str) -> Obj:
        return create(cp, dedicated_pod(name, owner=owned, mem=CARD_MIB, scheduler=MANUAL))

    replica = start_extender(hami, f"{owned}-extender", "--leader-elect=false")
    with Allocations(admin_client(cp), nodes={node}) as done:  # the device plugin's lock release
        try:
            calls = SchedulerCalls(hami, replica)
            p = new_pod(f"{owned}-p")
            wait_until(lambda: calls.filter(p, [node])["NodeNames"] == [node], WAIT_S, "p fits", interval=0.5)
            replica = restart(replica)
            error = calls.bind(p, node)
            assert "no device reservation" in error and "will filter it again" in error, error
            assert node_of(cp, p["metadata"]["name"]) == ""
            wait_until(lambda: ("BindingFailed", error) in events_of(cp, p["metadata"]["name"]), WAIT_S,
                       "p's BindingFailed event", interval=0.5)  # fmt: skip
            assert calls.filter(p, [node])["NodeNames"] == [node]
            assert calls.bind(p, node) == ""
            wait_until(
                lambda: done.count == 1, WAIT_S, "p allocated and the node lock released", interval=0.2
            )
            (card_p,) = cards_of(
                next(x for x in pods(cp, owned) if x["metadata"]["name"] == p["metadata"]["name"])
            )

            # the second card: reserved for r, then (after a restart) taken by s
            r, s = new_pod(f"{owned}-r"), new_pod(f"{owned}-s")
            wait_until(lambda: calls.filter(r, [node])["NodeNames"] == [node], WAIT_S, "r fits", interval=0.5)
            replica = restart(replica)
            wait_until(lambda: calls.filter(s, [node])["NodeNames"] == [node], WAIT_S, "s fits", interval=0.5)
            assert "no device reservation" in calls.bind(r, node)
            assert calls.bind(s, node) == ""

            def no_room_for_r() -> Obj | None:
                result = calls.filter(r, [node])
                return result if not result["NodeNames"] else None

            refused = wait_until(
                no_room_for_r, WAIT_S, "s's allocation in the extender's cache", interval=0.5
            )
            assert node in refused["FailedNodes"]
        finally:
            cp.stop_child(replica.extender)
    assert not done.errors
    bound = {x["metadata"]["name"]: cards_of(x) for x in pods(cp, owned) if x["spec"].get("nodeName")}
    assert sorted(bound) == [f"{owned}-p", f"{owned}-s"]
    assert sorted(card for got in bound.values() for card in got) == [f"GPU-{node}-0", f"GPU-{node}-1"]
    assert card_p in bound[f"{owned}-p"]
