"""NVIDIA ``Fit`` alone, replaying HAMi's own test cases (``tests.scheduler.vectors.fit``)."""

from __future__ import annotations

from typing import Any

import pytest

from hami.core.devices import DeviceInfo
from hami.scheduler.engine.device_config import NvidiaConfig
from hami.scheduler.engine.fit import PodContext, fit_devices
from hami.scheduler.engine.policy import parse_gpu_policy, parse_scoring_weights
from hami.scheduler.engine.requests import pod_request
from hami.testing.builders import dev, pod, res
from hami.testing.engineinputs import node_state, usage
from tests.scheduler.vectors.fit import FIT_VECTORS, FitRow


def fit_one(devices: tuple[DeviceInfo, ...], container: dict[str, Any], *,
            used: tuple[tuple[str, int, int, int], ...] = (), annotations: dict[str, str] | None = None,
            gpu_policy: str = "spread", cordoned: tuple[str, ...] = ()) -> list[str] | str:
    """NVIDIA ``Fit`` alone (no node-level count check): chosen UUIDs in order, or the reason."""
    request = pod_request(pod(container, annotations=annotations), NvidiaConfig())
    assert request is not None and len(request.reqs) == 1
    req, options = request.reqs[0], request.options
    assert req is not None
    ctx = PodContext(request=request, policy=parse_gpu_policy(options.gpu_policy or gpu_policy),
                     weights=parse_scoring_weights(options.scoring_weights), quota=None)
    state = node_state("n", *devices, cordoned=cordoned)
    view = usage(*(("n", *u) for u in used)).view(state)
    picks = fit_devices(view, (view.used, view.umem, view.ucores), req, ctx, ())
    if isinstance(picks, str):
        return picks
    return [view.devs[p].id for p, _, _, _ in picks]


@pytest.mark.parametrize("row", FIT_VECTORS, ids=[row[0] for row in FIT_VECTORS])
def test_fit_vector(row: FitRow) -> None:
    _, devices, container, used, annotations, policy, cordoned, expected = row
    got = fit_one(devices, container, used=used, annotations=annotations, gpu_policy=policy,
                  cordoned=cordoned)
    assert got == expected


def test_fit_in_certain_device_mixed_reasons() -> None:
    """Test_fitInCertainDevice: 10 cards rejected for 4 reasons, GenReason sorts items as strings."""
    devices = tuple(dev(f"g{i}", index=i, count=1 if 3 <= i < 7 else 10) for i in range(10))
    used = (
        *((f"g{i}", 1, 0, 0) for i in range(3, 7)),  # time slicing exhausted
        ("g7", 1, 7500, 0), ("g8", 1, 7500, 0),  # memory
        ("g9", 1, 0, 90),  # cores
    )
    got = fit_one(devices, res(1, 1000, 20), used=used, annotations={"nvidia.com/nouse-gpuuuid": "g0,g1,g2"})
    assert got == ("1/10 CardInsufficientCore, 2/10 CardInsufficientMemory, 3/10 CardUuidMismatch, "
                   "4/10 CardTimeSlicingExhausted")
