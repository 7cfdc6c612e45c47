"""MIG in the scheduler core: profile choice, placements, revisits, reservations and health (§4.5,
docs/design/scheduler-extender.md §6.2).

Section signs (§) refer to docs/design/scheduler-filter.md.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.core.devices import ContainerDevice, DeviceInfo, MigAllocation, MigPlacement
from hami.scheduler.engine import mig
from hami.scheduler.engine.decision import FilterConfig, commit, filter_pod
from hami.scheduler.engine.device_config import NvidiaConfig
from hami.scheduler.engine.mig import unreserved
from hami.scheduler.engine.requests import PodRequest, pod_request
from hami.scheduler.engine.usage import DeviceShare, PodAllocation, UsageIndex
from hami.testing.builders import A100_40GB_PROFILES, dev, mig_dev, pod, res
from hami.testing.engineinputs import node_state


def decode(the_pod: dict[str, Any]) -> PodRequest:
    request = pod_request(the_pod, NvidiaConfig())
    assert request is not None, "the pod asks for a GPU"
    return request

# A reservation held by another pod: (uuid, profile, placement start, placement size, MiB).
Held = tuple[str, str, int, int, int]
# Expected: a reason string, or per container the (uuid, profile, start) of each device.
Expected = str | list[list[tuple[str, str, int]]]


def holders(*held: Held) -> UsageIndex:
    index = UsageIndex()
    for i, (uuid, profile, start, size, mem) in enumerate(held):
        alloc = MigAllocation(0, 0, uuid, profile, MigPlacement(start, size))
        index.add(PodAllocation(f"h{i}", "other", f"h{i}", "n", (DeviceShare(uuid, mem, 0),), (alloc,),
                                frozenset()))
    return index


def place(devices: tuple[DeviceInfo, ...], the_pod: dict[str, Any], index: UsageIndex) -> Expected:
    result = filter_pod(decode(the_pod), [node_state("n", *devices)], index, None, FilterConfig())
    if result.node is None:
        return result.failed["n"]
    by_entry = {(a.container_index, a.device_index): a for a in result.mig}
    out: list[list[tuple[str, str, int]]] = []
    for ci, container in enumerate(result.devices):
        row = []
        for di, d in enumerate(container):
            a = by_entry.get((ci, di))
            row.append((d.uuid, a.profile, a.placement.start) if a else (d.uuid, "", -1))
        out.append(row)
    return out


MIG = (mig_dev("m0"),)
Row = tuple[str, tuple[DeviceInfo, ...], dict[str, Any], tuple[Held, ...], Expected]
ROWS: list[Row] = [
    ("TestFit_MigPercentageRequestRejectsUndersizedTemplate",
     (mig_dev("m0", profiles=A100_40GB_PROFILES[:3]),), pod(res(1, pct=60)), (),
     "1/1 CardMigTopologyInfeasible"),
    ("TestFit_MigPercentageRequestUsesLargerTemplate", MIG, pod(res(1, pct=60)), (),
     [[("m0", "7g.40gb", 0)]]),
    ("TestCustomFilterRule_NonMig", (dev("g0"),), pod(res(1, 1000)), (), [[("g0", "", -1)]]),
    ("smallest_profile_covering_the_request", MIG, pod(res(1, 4000)), (), [[("m0", "1g.5gb", 0)]]),
    ("equal_memory_prefers_fewer_slices", MIG, pod(res(1, 15000)), (), [[("m0", "3g.20gb", 0)]]),
    ("i++_revisit_gives_one_card_several_instances", MIG, pod(res(3, 9000)), (),
     [[("m0", "2g.10gb", 0), ("m0", "2g.10gb", 2), ("m0", "2g.10gb", 4)]]),
    ("revisit_failure_counted_once_per_card", MIG, pod(res(4, 9000)), (),
     "1/1 AllocatedCardsInsufficientRequest"),
    ("existing_reservations_are_skipped", MIG, pod(res(1, 9000)),
     (("m0", "2g.10gb", 0, 2, 9984), ("m0", "1g.5gb", 2, 1, 4864)), [[("m0", "2g.10gb", 4)]]),
    ("larger_profile_when_smaller_has_no_free_placement", MIG, pod(res(1, 4000)),
     tuple(("m0", "1g.5gb", s, 1, 4864) for s in range(6)), [[("m0", "1g.5gb", 6)]]),
    ("no_free_placement", MIG, pod(res(1, 15000)),
     (("m0", "1g.5gb", 1, 1, 4864), ("m0", "1g.5gb", 5, 1, 4864)), "1/1 CardMigTopologyInfeasible"),
    ("profiles_across_containers_do_not_overlap", MIG, pod(res(1, 15000), res(1, 15000)), (),
     [[("m0", "3g.20gb", 0)], [("m0", "3g.20gb", 4)]]),
    ("init_container_placement_stays_in_use", MIG, pod(res(1, 15000), init=(res(1, 15000),)), (),
     [[("m0", "3g.20gb", 0)], [("m0", "3g.20gb", 4)]]),
    ("vgpu_mode_mig_prefers_the_mig_card", (dev("g0", 81920), mig_dev("m0", index=1)),
     pod(res(1, 4000), annotations={"nvidia.com/vgpu-mode": "mig"}), (), [[("m0", "1g.5gb", 0)]]),
    ("vgpu_mode_hami_core_skips_mig_cards", MIG,
     pod(res(1, 4000), annotations={"nvidia.com/vgpu-mode": "hami-core"}), (), "1/1 CardTypeMismatch"),
    ("node_count_check_waived_for_mig", MIG, pod(res(2, 4000)), (),
     [[("m0", "1g.5gb", 0), ("m0", "1g.5gb", 1)]]),
    ("node_count_check_applies_when_mode_excludes_mig", MIG,
     pod(res(2, 4000), annotations={"nvidia.com/vgpu-mode": "hami-core"}), (), "NodeInsufficientDevice"),
    ("exclusive_cores_still_block_a_used_mig_card", MIG, pod(res(1, 4000, 100)),
     (("m0", "1g.5gb", 0, 1, 4864),), "1/1 ExclusiveDeviceAllocateConflict"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_mig_vector(row: Row) -> None:
    _, devices, the_pod, held, expected = row
    assert place(devices, the_pod, holders(*held)) == expected


def test_usedmem_is_the_profile_memory_and_annotation_indexes_follow_containers() -> None:
    the_pod = pod(res(1, 3000), res(2, pct=10))
    result = filter_pod(decode(the_pod), [node_state("n", *MIG)], UsageIndex(), None, FilterConfig())
    assert result.devices == (
        (ContainerDevice("m0", "NVIDIA", 4864, 0),),
        (ContainerDevice("m0", "NVIDIA", 4864, 0), ContainerDevice("m0", "NVIDIA", 4864, 0)),
    )
    assert [(a.container_index, a.device_index, a.placement.start) for a in result.mig] == [
        (0, 0, 0), (1, 0, 1), (1, 1, 2)]
    assert result.reservation is not None and result.reservation.mig == result.mig


def test_hami_core_pod_writes_no_mig_allocations() -> None:
    nodes = [node_state("n", dev("g0"))]
    result = filter_pod(decode(pod(res(1, 1000))), nodes, UsageIndex(), None, FilterConfig())
    assert result.node == "n" and result.mig == ()


def test_committed_placements_are_in_use_and_a_refilter_releases_its_own() -> None:
    index = UsageIndex()
    nodes = [node_state("n", *MIG)]
    first = filter_pod(decode(pod(res(1, 15000), uid="a")), nodes, index, None, FilterConfig())
    commit(first, index, None)
    second = filter_pod(decode(pod(res(1, 15000), uid="b")), nodes, index, None, FilterConfig())
    assert [a.placement.start for a in first.mig] == [0] and [a.placement.start for a in second.mig] == [4]
    commit(second, index, None)
    # Memory (step 11) is checked before placements (step 15): 2 × 19968 of 40960 MiB are held.
    assert filter_pod(decode(pod(res(1, 15000), uid="c")), nodes, index, None, FilterConfig()).failed == {
        "n": "1/1 CardInsufficientMemory"}
    assert filter_pod(decode(pod(res(1, 1000), uid="c")), nodes, index, None, FilterConfig()).failed == {
        "n": "1/1 CardMigTopologyInfeasible"}
    again = filter_pod(decode(pod(res(1, 15000), uid="a")), nodes, index, None, FilterConfig())
    assert [a.placement.start for a in again.mig] == [0]


def _holding(uuid: str, reserved: bool) -> PodAllocation:
    devices = ((ContainerDevice(uuid, "NVIDIA", 4864, 0),),)
    allocs = (MigAllocation(0, 0, uuid, "1g.5gb", MigPlacement(0, 1)),) if reserved else ()
    return PodAllocation("h", "other", "h", "n", (DeviceShare(uuid, 4864, 0),), allocs,
                         unreserved(devices, allocs))


@pytest.mark.parametrize(("card", "reserved"), [(mig_dev("x"), False), (dev("x"), True)],
                         ids=["mig_card_held_without_reservation", "mig_reservation_on_hami_core_card"])
def test_inconsistent_reservations_take_the_card_out_of_service(card: DeviceInfo, reserved: bool) -> None:
    index = UsageIndex()
    index.add(_holding("x", reserved))
    result = filter_pod(decode(pod(res(1, 1000))), [node_state("n", card)], index, None, FilterConfig())
    assert result.failed == {"n": "1/1 CardNotHealth"}
    index.remove("h")
    again = filter_pod(decode(pod(res(1, 1000))), [node_state("n", card)], index, None, FilterConfig())
    assert again.node == "n"


def test_unreserved_lists_entries_without_a_matching_reservation() -> None:
    devices = ((ContainerDevice("a", "NVIDIA", 1, 0),), (ContainerDevice("a", "NVIDIA", 1, 0),
                                                        ContainerDevice("b", "NVIDIA", 1, 0)))
    allocs = [MigAllocation(0, 0, "a", "p", MigPlacement(0, 1)),
              MigAllocation(1, 1, "a", "p", MigPlacement(1, 1))]
    assert unreserved(devices, allocs) == frozenset({"a", "b"})
    assert unreserved(devices[:1], allocs) == frozenset()


def test_select_and_overlap() -> None:
    assert mig.overlaps(MigPlacement(0, 2), MigPlacement(1, 1))
    assert not mig.overlaps(MigPlacement(0, 2), MigPlacement(2, 2))
    profiles = mig.candidates(reversed(A100_40GB_PROFILES))
    assert [p.name for p in profiles] == ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    assert mig.select(profiles, [MigPlacement(0, 8)], 1) is None
    assert mig.select(profiles, [], 50000) is None
    assert mig.select(profiles, [MigPlacement(0, 4)], 19968) == ("3g.20gb", 19968, MigPlacement(4, 4))


@st.composite
def mig_pods(draw: st.DrawFn, uid: str) -> dict[str, Any]:
    def container() -> dict[str, Any]:
        if draw(st.booleans()):
            return res(draw(st.integers(1, 3)), pct=draw(st.integers(1, 100)))
        return res(draw(st.integers(1, 3)), draw(st.integers(1, 41000)))
    apps = [container() for _ in range(draw(st.integers(1, 2)))]
    inits = tuple(container() for _ in range(draw(st.integers(0, 1))))
    return pod(*apps, init=inits, uid=uid,
               annotations={"hami.io/gpu-scheduler-policy": draw(st.sampled_from(["spread", "binpack"]))})


@st.composite
def mig_cards(draw: st.DrawFn) -> tuple[list[DeviceInfo], UsageIndex]:
    """Up to three A100s in MIG mode, each with a random set of valid existing reservations."""
    cards = [mig_dev(f"m{i}", index=i) for i in range(draw(st.integers(1, 3)))]
    index = UsageIndex()
    for card in cards:
        held: list[MigPlacement] = []
        for _ in range(draw(st.integers(0, 4))):
            profile = draw(st.sampled_from(A100_40GB_PROFILES))
            choice = mig.select((profile,), held, 0)
            if choice is not None:
                held.append(choice[2])
                alloc = MigAllocation(0, 0, card.id, profile.name, choice[2])
                index.add(PodAllocation(f"h-{card.id}-{len(held)}", "other", "h", "n",
                                        (DeviceShare(card.id, 0, 0),), (alloc,), frozenset()))
    return cards, index


@settings(max_examples=200, deadline=None)
@given(mig_cards(), st.lists(mig_pods(uid="x"), min_size=1, max_size=4))
def test_mig_placements_never_overlap_and_profiles_fit(
    cluster: tuple[list[DeviceInfo], UsageIndex], sequence: list[dict[str, Any]],
) -> None:
    cards, index = cluster
    nodes = [node_state("n", *cards)]
    profiles = {p.name: p for p in A100_40GB_PROFILES}
    for i, the_pod in enumerate(sequence):
        the_pod["metadata"]["uid"] = f"pod-{i}"
        request = decode(the_pod)
        result = filter_pod(request, nodes, index, None, FilterConfig())
        if result.node is None:
            continue
        reqs = request.reqs
        for a in result.mig:
            req = reqs[a.container_index]
            assert req is not None
            wanted = req.memreq or 40960 * req.mem_percentage // 100
            profile = profiles[a.profile]
            assert profile.memory_mb >= wanted, "a profile was chosen that the memory does not fit"
            assert a.placement in profile.placements
            assert result.devices[a.container_index][a.device_index].usedmem == profile.memory_mb
        assert len(result.mig) == sum(len(c) for c in result.devices), "every MIG device has a placement"
        commit(result, index, None)
    for card in cards:
        held = [a.placement for alloc in index.pods() for a in alloc.mig if a.gpu_uuid == card.id]
        for j, a in enumerate(held):
            assert not any(mig.overlaps(a, b) for b in held[j + 1:]), f"overlapping placements on {card.id}"
