"""HAMi's Fit rejects every card for a request of another device type (checkType's ``n.Type``)."""

from __future__ import annotations

from dataclasses import replace

from hami.scheduler.engine.fit import PodContext, fit_devices, fit_node, fits_quickly
from hami.scheduler.engine.policy import parse_gpu_policy, parse_scoring_weights
from hami.scheduler.engine.requests import ContainerRequest, PodOptions, PodRequest
from hami.testing.builders import dev
from hami.testing.engineinputs import node_state, usage


def _ctx(req: ContainerRequest) -> PodContext:
    request = PodRequest("u", "default", "p", (req,), 0, PodOptions())
    return PodContext(request=request, policy=parse_gpu_policy("spread"), weights=parse_scoring_weights(None),
                      quota=None)  # fmt: skip


def test_a_request_of_another_type_is_card_type_mismatch_on_every_card() -> None:
    view = usage().view(node_state("n", dev("g0"), dev("g1", index=1)))
    nvidia = ContainerRequest(nums=1, memreq=1000)
    other = replace(nvidia, type="Ascend")
    load = (view.used, view.umem, view.ucores)
    assert not isinstance(fit_devices(view, load, nvidia, _ctx(nvidia), ()), str)
    assert fit_devices(view, load, other, _ctx(other), ()) == "2/2 CardTypeMismatch"
    assert fit_node(view, _ctx(other)) == "2/2 CardTypeMismatch"
    assert fits_quickly(view, _ctx(other)) == "2/2 CardTypeMismatch"
    assert fits_quickly(view, _ctx(nvidia)) is True
