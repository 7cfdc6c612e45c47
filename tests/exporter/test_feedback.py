"""Each branch of the feedback step (§A.9), and the loop against real mapped files.

Section signs (§) refer to docs/design/node-agent-region.md.
"""

import logging
from pathlib import Path

import pytest

from hami.exporter.discovery import ContainerLister
from hami.exporter.feedback import FeedbackLoop, FeedbackState, FeedbackWrite, feedback_tick, observe
from hami.testing.regions import RegionWriter

GPU_A = b"GPU-a".ljust(96, b"\0")
GPU_B = b"GPU-b".ljust(96, b"\0")


def st(key: str, rk: int, prio: int = 1, us: int = 1, uuids: tuple[bytes, ...] = (GPU_A,)) -> FeedbackState:
    return FeedbackState(key, rk, prio, us, uuids)


def final(writes: list[FeedbackWrite]) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for w in writes:
        out[(w.key, w.field)] = w.value
    return out


def test_decay_from_2_counts_as_active_and_stores_1() -> None:
    assert final(observe([st("a", 2, us=0)]))[("a", "recent_kernel")] == 1


def test_decay_to_0_is_stored_and_not_counted() -> None:
    """rk 1 -> 0 is written; two such containers are not 'active', so no contention."""
    out = final(observe([st("a", 1), st("b", 1)]))
    assert out[("a", "recent_kernel")] == 0 and out[("a", "utilization_switch")] == 0


def test_idle_container_untouched_and_switch_turned_off() -> None:
    assert observe([st("a", 0, us=0)]) == []
    assert observe([st("a", 0, us=1)]) == [FeedbackWrite("a", "utilization_switch", 0)]


def test_higher_priority_activity_blocks_lower() -> None:
    out = final(observe([st("hi", 2, prio=0), st("lo", 0, prio=1, us=0)]))
    assert out[("lo", "recent_kernel")] == -1
    assert out[("lo", "utilization_switch")] == 1  # blocking implies contention
    assert ("hi", "utilization_switch") in out and out[("hi", "utilization_switch")] == 0


def test_blocking_only_on_shared_gpu() -> None:
    out = final(observe([st("hi", 2, prio=0, uuids=(GPU_B,)), st("lo", 0, prio=1, uuids=(GPU_A,))]))
    assert ("lo", "recent_kernel") not in out


def test_blocked_container_unblocked_when_higher_goes_idle() -> None:
    out = final(observe([st("hi", 1, prio=0), st("lo", -1, prio=1, us=1)]))
    assert out[("lo", "recent_kernel")] == 0


def test_already_blocked_stays_without_write() -> None:
    writes = observe([st("hi", 2, prio=0), st("lo", -1, prio=1, us=1)])
    assert FeedbackWrite("lo", "recent_kernel", -1) not in writes


def test_two_active_same_priority_turn_switch_on() -> None:
    out = final(observe([st("a", 2, us=0), st("b", 2, us=0)]))
    assert out[("a", "utilization_switch")] == 1 and out[("b", "utilization_switch")] == 1


def test_switch_already_on_under_contention_not_rewritten() -> None:
    writes = observe([st("a", 2, us=1), st("b", 2, us=1)])
    assert all(w.field == "recent_kernel" for w in writes)


def test_negative_priority_never_counted() -> None:
    out = final(observe([st("a", 2, prio=-1, us=1), st("b", 2, prio=-1, us=1)]))
    assert out[("a", "utilization_switch")] == 0


def test_loop_writes_into_mapped_regions(tmp_path: Path) -> None:
    writers = []
    for name, prio in (("uid1_hi", 0), ("uid2_lo", 1)):
        d = tmp_path / "containers" / name
        d.mkdir(parents=True)
        w = RegionWriter.create(str(d / "x.cache"), "v1.2")
        w.initialise(["GPU-a"], priority=prio)
        writers.append(w)
    writers[1].set_field("recent_kernel", 0)  # the low-priority container is idle
    lister = ContainerLister(str(tmp_path))
    lister.update(None)
    feedback_tick(lister)
    hi, lo = writers
    assert hi.get_field("recent_kernel") == 1 and lo.get_field("recent_kernel") == -1
    assert lo.get_field("utilization_switch") == 1 and hi.get_field("utilization_switch") == 0
    feedback_tick(lister)  # hi decays to 0: lo is released
    assert hi.get_field("recent_kernel") == 0 and lo.get_field("recent_kernel") == 0
    assert lo.get_field("utilization_switch") == 0
    lister.close()
    for w in writers:
        w.close()


def test_mig_apply_lock_pauses_rescan_and_writes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "containers" / "uid1_main"
    d.mkdir(parents=True)
    w = RegionWriter.create(str(d / "x.cache"), "v1.2")
    w.initialise(["GPU-a"], priority=1)
    w.set_field("recent_kernel", 3)
    lock = tmp_path / "hami" / "hami-mig-apply.lock"
    lister = ContainerLister(str(tmp_path))
    loop = FeedbackLoop(lister, lambda: None, mig_lock=str(lock))
    loop.prepare()
    assert lock.parent.is_dir() and lock.parent.stat().st_mode & 0o777 == 0o755
    lock.write_text("", encoding="utf-8")
    with caplog.at_level(logging.INFO):
        loop.tick()
        loop.tick()
        assert loop.paused and lister.containers() == []  # no rescan while repartitioning
        assert w.get_field("recent_kernel") == 3  # and no write
        lock.unlink()
        loop.tick()
    assert not loop.paused and w.get_field("recent_kernel") == 2
    lines = [r.getMessage() for r in caplog.records]
    assert lines.count("MIG apply lock file detected, waiting for lock file to be removed") == 1
    assert "MIG apply lock file has been removed, restarting watchAndFeedback" in lines
    lister.close()
    w.close()
