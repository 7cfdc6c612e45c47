"""NVIDIA ``Fit`` on one node, one row per HAMi test case (named after it): the devices, one container's
request, what other pods use, and the UUIDs chosen or the reason given."""

from __future__ import annotations

from typing import Any

from hami.core.devices import DeviceInfo
from hami.testing.builders import dev, res

V100 = "NVIDIA-Tesla V100-PCIE-32GB"

# (id, devices, container, used (uuid, slots, MiB, cores), annotations, gpu policy, cordoned, expected:
# the chosen UUIDs in order, or the reason string)
FitRow = tuple[str, tuple[DeviceInfo, ...], dict[str, Any], tuple[tuple[str, int, int, int], ...],
            dict[str, str], str, tuple[str, ...], list[str] | str]
FIT_VECTORS: list[FitRow] = [
    ("TestDevices_Fit/fit_success", (dev("g0"),), res(1, 1000, 30), (), {}, "spread", (), ["g0"]),
    ("TestDevices_Fit/CardInsufficientMemory", (dev("g0"),), res(1, 1000, 30),
     (("g0", 1, 7500, 10),), {}, "spread", (), "1/1 CardInsufficientMemory"),
    ("TestDevices_Fit/CardInsufficientCore", (dev("g0"),), res(1, 1000, 30),
     (("g0", 1, 1000, 80),), {}, "spread", (), "1/1 CardInsufficientCore"),
    ("TestDevices_Fit/CardTypeMismatch_use_gputype", (dev("g0", type=V100),), res(1, 1000, 30), (),
     {"nvidia.com/use-gputype": "A100"}, "spread", (), "1/1 CardTypeMismatch"),
    ("TestDevices_Fit/CardTypeMismatch_nouse_gputype", (dev("g0", type=V100),), res(1, 1000, 30), (),
     {"nvidia.com/nouse-gputype": " v100 "}, "spread", (), "1/1 CardTypeMismatch"),
    ("TestDevices_Fit/CardTypeMismatch_vgpu_mode", (dev("g0"),), res(1, 1000, 30), (),
     {"nvidia.com/vgpu-mode": "mig"}, "spread", (), "1/1 CardTypeMismatch"),
    ("TestDevices_Fit/CardUuidMismatch_use_gpuuuid_miss", (dev("g0"),), res(1, 1000, 30), (),
     {"nvidia.com/use-gpuuuid": "g9, g8"}, "spread", (), "1/1 CardUuidMismatch"),
    ("TestDevices_Fit/CardUuidMismatch_nouse_gpuuuid_hit", (dev("g0"),), res(1, 1000, 30), (),
     {"nvidia.com/nouse-gpuuuid": "g1,g0"}, "spread", (), "1/1 CardUuidMismatch"),
    ("TestDevices_Fit/CardTimeSlicingExhausted", (dev("g0", count=2),), res(1, 1000, 30),
     (("g0", 2, 1000, 10),), {}, "spread", (), "1/1 CardTimeSlicingExhausted"),
    ("TestDevices_Fit/cores_120_clamped_fits", (dev("g0"),), res(1, 1000, 120), (), {}, "spread", (), ["g0"]),
    ("TestDevices_Fit/ExclusiveDeviceAllocateConflict", (dev("g0"),), res(1, 1000, 100),
     (("g0", 1, 1000, 0),), {}, "spread", (), "1/1 ExclusiveDeviceAllocateConflict"),
    ("TestDevices_Fit/CardComputeUnitsExhausted", (dev("g0"),), res(1, 1000, 0),
     (("g0", 1, 1000, 100),), {}, "spread", (), "1/1 CardComputeUnitsExhausted"),
    ("TestDevices_Fit/AllocatedCardsInsufficientRequest_nums2_one_card", (dev("g0"),), res(2, 1000, 30), (),
     {}, "spread", (), "1/1 AllocatedCardsInsufficientRequest"),
    ("TestDevices_Fit/AllocatedCardsInsufficientRequest_nums3_two_cards", (dev("g0"), dev("g1", index=1)),
     res(3, 1000, 30), (), {}, "spread", (), "2/2 AllocatedCardsInsufficientRequest"),
    ("TestDevices_Fit/memory_percentage_fits", (dev("g0"),), res(1, pct=50), (("g0", 1, 4000, 0),), {},
     "spread", (), ["g0"]),
    ("TestDevices_Fit/memory_percentage_too_big", (dev("g0"),), res(1, pct=60), (("g0", 1, 4000, 0),), {},
     "spread", (), "1/1 CardInsufficientMemory"),
    ("TestDevices_Fit/CardNotHealth", (dev("g0", health=False),), res(1, 1000, 30), (), {}, "spread", (),
     "1/1 CardNotHealth"),
    ("TestFit_DeviceCordon/cordoned_skipped", (dev("g0"), dev("g1", index=1)), res(1, 1000), (), {}, "spread",
     ("g1",), ["g0"]),
    ("TestFit_DeviceCordon/all_cordoned", (dev("g0"), dev("g1", index=1)), res(2, 1000), (), {}, "spread",
     ("g1",), "1/2 AllocatedCardsInsufficientRequest, 1/2 CardCordoned"),
    ("TestFit_NumaSwitching", (dev("dev-0", numa=1), dev("dev-1", numa=1, index=1), dev("dev-2", index=2)),
     res(2, 1000), (), {"nvidia.com/numa-bind": "true"}, "spread", (), ["dev-1", "dev-0"]),
    ("TestFit_NumaSwitching/NumaNotFit", (dev("a", numa=1), dev("b", index=1)), res(2, 1000), (),
     {"nvidia.com/numa-bind": "1"}, "spread", (), "1/2 AllocatedCardsInsufficientRequest, 1/2 NumaNotFit"),
    ("TestFit_MutexPolicy/one_card_gets_idle", (dev("busy"), dev("idle", index=1)), res(1, 1000),
     (("busy", 1, 1000, 10),), {}, "mutex", (), ["idle"]),
    ("TestFit_MutexPolicy/two_cards_fail", (dev("busy"), dev("idle", index=1)), res(2, 1000),
     (("busy", 1, 1000, 10),), {}, "mutex", (),
     "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict"),
    ("TestFit_TopologyExactMatch", (dev("a", pair={"b": 50}), dev("b", index=1, pair={"a": 50})),
     res(2, 1000), (), {}, "topology-aware", (), ["b", "a"]),
    ("TestFit_TopologyWorstSingleCard",
     (dev("a", pair={"b": 100, "c": 10}), dev("b", index=1, pair={"a": 100, "c": 10}),
      dev("c", index=2, pair={"a": 10, "b": 10})), res(1, 1000), (), {}, "topology-aware", (), ["c"]),
    ("TestFit_TopologyBestCombination",
     (dev("a", pair={"b": 10, "c": 10, "d": 90}), dev("b", index=1, pair={"a": 10, "c": 80, "d": 10}),
      dev("c", index=2, pair={"a": 10, "b": 80, "d": 10}),
      dev("d", index=3, pair={"a": 90, "b": 10, "c": 10})),
     res(2, 1000), (), {}, "topology-aware", (), ["d", "a"]),
    ("TestFit_TopologyBestCombinationZeroScores", (dev("a"), dev("b", index=1), dev("c", index=2)),
     res(2, 1000), (), {}, "topology-aware", (), ["c", "b"]),
    ("TestFit_TopologyNegativeScores",
     (dev("a", pair={"b": -50, "c": -5}), dev("b", index=1, pair={"a": -50, "c": -40}),
      dev("c", index=2, pair={"a": -5, "b": -40})), res(2, 1000), (), {}, "topology-aware", (), ["c", "a"]),
    ("TestFit_TopologyTooFew", (dev("a"), dev("b", index=1, health=False)), res(2, 1000), (), {},
     "topology-aware", (), "1/2 AllocatedCardsInsufficientRequest, 1/2 CardNotHealth"),
    ("TestCustomFilterRule_NonMig", (dev("g0"),), res(1, 1000), (), {}, "spread", (), ["g0"]),
    ("TestFit_MigCardWithoutProfiles", (dev("g0", mode="mig"),), res(1, 1000), (), {}, "spread", (),
     "1/1 CardMigTopologyInfeasible"),
]
