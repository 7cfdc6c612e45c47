"""What a snapshot reads from the pods' events: when the scheduler first decided on each pod (to a
fraction of a second), and the GPU pods deleted before the snapshot."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hami.core.snapshot import model as snap
from hami.core.snapshot import reader, writer
from hami.doctor.capture import CaptureSettings, capture
from hami.doctor.main import main
from hami.doctor.snapshot_events import decided_at, first_attempts, gone_since
from hami.testing import cluster
from hami.testing.history import HistorySpec, decision_event, generate
from hami.testing.kubeapi import KubeAPIServer

T = 1_750_000_000.25


def pod(name: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid}}


def test_the_event_name_dates_the_decision_to_the_nanosecond() -> None:
    event = decision_event(pod("a", "u1"), True, T)
    assert decided_at(event) == ("u1", pytest.approx(T, abs=1e-6))


def test_a_name_outside_the_events_own_second_is_no_time() -> None:
    event = decision_event(pod("a", "u1"), True, T)
    event["firstTimestamp"] = "2025-06-15T15:06:41Z"  # a second other than the name's
    assert decided_at(event) is None
    event["metadata"]["name"] = "a.not-hex"
    assert decided_at(event) is None


def test_an_events_k8s_io_event_gives_its_microsecond_event_time() -> None:
    event = {
        "reason": "Scheduled",
        "metadata": {"name": "a-without-time"},
        "regarding": {"kind": "Pod", "uid": "u2"},
        "eventTime": "2025-06-15T15:06:40.123456Z",
    }
    got = decided_at(event)
    assert got is not None and got[0] == "u2"
    assert got[1] == pytest.approx(datetime(2025, 6, 15, 15, 6, 40, 123456, UTC).timestamp())


POD = {"kind": "Pod", "uid": "u"}
AT = "2025-06-15T15:06:40.5Z"


@pytest.mark.parametrize(
    "event",
    [
        {"reason": "Pulled", "involvedObject": POD, "eventTime": AT},
        {"reason": "Scheduled", "involvedObject": {"kind": "Node", "uid": "u"}, "eventTime": AT},
        {"reason": "Scheduled", "involvedObject": {"kind": "Pod"}, "eventTime": AT},
        {"reason": "Scheduled", "involvedObject": "pod", "eventTime": AT},
        {"reason": "Scheduled", "involvedObject": POD, "eventTime": "yesterday"},
        {"reason": "Scheduled", "involvedObject": POD, "firstTimestamp": "2025-06-15T15:06:40Z"},
        {"reason": "Scheduled", "involvedObject": POD, "metadata": {"name": 7}},
    ],
)
def test_other_or_malformed_events_give_no_time(event: dict[str, Any]) -> None:
    assert decided_at(event) is None


def test_the_earliest_decision_is_the_first_attempt() -> None:
    events = [
        decision_event(pod("a", "u1"), True, T + 3),
        decision_event(pod("a", "u1"), False, T),
        "not an event",
        decision_event(pod("b", "u2"), True, T + 0.5),
    ]
    got = first_attempts(events)
    assert got == {"u1": pytest.approx(T, abs=1e-6), "u2": pytest.approx(T + 0.5, abs=1e-6)}


def test_gpu_pods_the_api_no_longer_lists_are_counted_from_their_first_placement() -> None:
    events = [
        decision_event(pod("kept", "u1"), True, T),
        decision_event(pod("gone", "u2"), False, T + 1),  # waited: placed later
        decision_event(pod("gone", "u2"), True, T + 5),
        decision_event(pod("gone-too", "u3"), True, T + 9),
        decision_event(pod("never-placed", "u4"), False, T + 2),
    ]
    since, count = gone_since(events, {"u1"})
    assert since == pytest.approx(T + 5, abs=1e-6)
    assert count == 2
    assert gone_since(events[:1], {"u1"}) == (None, 0)


def test_a_captured_snapshot_keeps_first_attempts_and_what_is_gone() -> None:
    h = generate(HistorySpec(nodes=2, gpus=2, pods=6, mean_gap=0.3, mean_life=2.0))
    kept = h.pods[2:]
    s = capture(h.nodes, kept, [], h.taken, CaptureSettings(scheduler=snap.Scheduler()), events=h.events)
    back = reader.loads(writer.dumps(s))
    for p in back.pods:
        assert p.first_attempt == pytest.approx(h.exact[p.uid][0], abs=1e-5)
    gone = [h.exact[p["metadata"]["uid"]][1] for p in h.pods[:2]]
    assert back.gone_since == pytest.approx(min(t for t in gone if t is not None), abs=1e-5)
    assert any("2 GPU pod(s) placed since" in note for note in back.notes)
    assert not any("reach back only" in note for note in back.notes)


def test_placements_older_than_the_oldest_event_are_named_in_a_note() -> None:
    """Events expire: before the oldest one, a deleted pod would leave no trace at all."""
    h = generate(HistorySpec(nodes=2, gpus=2, pods=6, mean_gap=2.0, mean_life=600.0))
    recent = sorted(h.events, key=lambda e: e["metadata"]["name"].rpartition(".")[2])[3:]
    s = capture(h.nodes, h.pods, [], h.taken, CaptureSettings(scheduler=snap.Scheduler()), events=recent)
    (note,) = [n for n in s.notes if "reach back only" in n]
    horizon = min(int(e["metadata"]["name"].rpartition(".")[2], 16) // 10**9 for e in recent)
    early = sum(1 for p in s.pods if p.scheduled is not None and p.scheduled < horizon)
    assert early > 0 and f"the {early} placement(s) made before then" in note


def test_events_the_api_refuses_leave_a_note_and_the_snapshot(
    kube_api: KubeAPIServer, kube_config_file: Path, tmp_path: Path
) -> None:
    now = datetime(2025, 6, 15, 16, 0, tzinfo=UTC)
    for obj in cluster.objects(gpus=2, now=now, scenarios=False):
        kube_api.store.put(obj)
    kube_api.faults.add(method="GET", path=r"^/api/v1/events$", status=403, times=None, message="forbidden")
    out = tmp_path / "s.json"
    argv = ["snapshot", "-o", str(out), "--kubeconfig", str(kube_config_file), "--now", now.isoformat()]
    assert main(argv, stdout=io.StringIO()) == 0
    s = reader.load_snapshot(out)
    assert s.pods and all(p.first_attempt is None for p in s.pods)
    assert s.gone_since is None
    (note,) = [n for n in s.notes if "events could not be listed" in n]
    assert "searched for" in note
