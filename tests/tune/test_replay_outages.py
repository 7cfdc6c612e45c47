"""The replay sees each card and node as the scheduler saw it at the time (snapshot outages), not as it
stood when the snapshot was taken; and the format keeps them (version 2)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from hami.core import annotations as ann
from hami.core.codec.node_devices import encode_node_devices
from hami.core.snapshot import model as snap
from hami.core.snapshot import reader, writer
from hami.testing import whatif
from hami.testing.builders import dev
from hami.tune.simulate.measures import fidelity
from hami.tune.simulate.replay import Replay
from hami.tune.simulate.scenario import Scenario

T0 = whatif.T0


def _history() -> snap.Snapshot:
    """n1's second card took a pod at 10 s, then fell off the bus at 100 s (unhealthy when the
    snapshot was taken); a pod at 200 s went to the first card. n2 was out (handshake expired) until
    300 s, so the pod at 250 s went to n1 although n2 is empty."""
    cards = [dev("n1-gpu0", 8000, index=0), dev("n1-gpu1", 8000, index=1, health=False)]
    n1 = snap.Node("n1", {ann.NODE_REGISTER: encode_node_devices(cards)}, allocatable_gpus=20)
    n2 = whatif.node("n2", 8000)
    pods = [
        whatif.pod("held", 0, mem=4000, placed=("n1", ["n1-gpu0"]), scheduled=-1),  # by hand
        whatif.pod("early", 10, mem=1000, placed=("n1", ["n1-gpu1"])),
        whatif.pod("late", 200, mem=1000, placed=("n1", ["n1-gpu0"])),
        whatif.pod("while-n2-out", 250, mem=1000, placed=("n1", ["n1-gpu0"])),
    ]
    s = whatif.snapshot([n1, n2], pods, node_policy="spread")
    outages = (
        snap.Outage("n1", T0 + 100, None, "n1-gpu1", "unhealthy"),
        snap.Outage("n2", T0, T0 + 300, "", "handshake_expired"),
    )
    return replace(s, outages=outages)


def test_outages_reproduce_what_the_end_state_cannot() -> None:
    s = _history()
    f = fidelity(Replay(s, Scenario()).run())
    assert (f.compared, f.same) == (3, 3), f.differences
    # as the snapshot stood at its end: the early pod cannot have its card, and n2 (empty, and the
    # spread policy's choice) takes pods it could not take then
    end_only = fidelity(Replay(replace(s, outages=()), Scenario()).run())
    assert "default/early" in {d.pod for d in end_only.differences}
    assert end_only.same < 3


def test_outages_survive_the_file_and_version_1_is_still_read() -> None:
    s = _history()
    doc = writer.to_document(s)
    assert doc["version"] == snap.VERSION == 3
    assert reader.from_document(json.loads(json.dumps(doc))).outages == s.outages
    old = {k: v for k, v in doc.items() if k != "outages"} | {"version": 1}
    assert reader.from_document(old).outages == ()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": 1}, "outages: not a field of a version 1 snapshot"),
        ({"outages": [{"node": "n1", "since": "2025-06-15T15:00:00Z", "until": "2025-06-15T14:00:00Z"}]},
         "outages[0].until: before 'since'"),
    ],
)  # fmt: skip
def test_bad_outages_are_refused(change: dict[str, object], message: str) -> None:
    doc = writer.to_document(_history()) | change
    with pytest.raises(snap.SnapshotError, match=message.replace("[", r"\[").replace("]", r"\]")):
        reader.from_document(doc)


def test_a_lock_does_not_refuse_the_bind_that_took_it() -> None:
    """A snapshot taken mid-bind: the node's lock is owned by the pod being bound (API snapshot)."""
    n1 = whatif.node("n1", 8000)
    pods = [
        whatif.pod("binding", 100, mem=1000, placed=("n1", ["n1-gpu0"])),
        whatif.pod("next", 110, mem=1000, placed=("n1", ["n1-gpu0"]), until=200),
    ]
    lock = snap.Lock("n1", T0 + 100, "default/binding")
    result = Replay(whatif.snapshot([n1], pods, locks=[lock], end=200), Scenario()).run()
    runs = {run.pod.name: run for run in result.runs}
    assert runs["binding"].placed_at == T0 + 100 and runs["binding"].bind_failures == 0
    # the lock still refuses another pod's bind until it expires (5m)
    assert runs["next"].bind_failures > 0 and runs["next"].placed_at is None
