"""Small builders for scheduler tests: devices, nodes, pods, usage."""

from __future__ import annotations

from typing import Any

from hami.core.devices import DeviceInfo, MigPlacement, MigProfile
from hami.scheduler.engine.nodes import NodeState
from hami.scheduler.engine.usage import DeviceShare, PodAllocation, UsageIndex


def dev(uuid: str, mem: int = 8000, *, count: int = 10, cores: int = 100, type: str = "NVIDIA",
        numa: int = 0, health: bool = True, index: int = 0, mode: str = "hami-core",
        pair: dict[str, int] | None = None, profiles: tuple[MigProfile, ...] = ()) -> DeviceInfo:
    return DeviceInfo(id=uuid, index=index, count=count, devmem=mem, devcore=cores, type=type, numa=numa,
                      mode=mode, health=health, mig_profiles=profiles, device_vendor="NVIDIA",
                      pair_score=pair or {})


def _profile(name: str, shape: tuple[int, int, int], starts: tuple[int, ...], size: int) -> MigProfile:
    mem, core, slices = shape
    return MigProfile(name, mem, core, slices, tuple(MigPlacement(s, size) for s in starts))


# An A100-SXM4-40GB's GPU-instance profiles as NVML reports them (placements in 1/8 memory slices).
A100_40GB_PROFILES = (
    _profile("1g.5gb", (4864, 14, 1), (0, 1, 2, 3, 4, 5, 6), 1),
    _profile("2g.10gb", (9984, 28, 2), (0, 2, 4), 2),
    _profile("3g.20gb", (19968, 42, 3), (0, 4), 4),
    _profile("4g.20gb", (19968, 57, 4), (0,), 4),
    _profile("7g.40gb", (40192, 100, 7), (0,), 8),
)


def mig_dev(uuid: str, *, index: int = 0, profiles: tuple[MigProfile, ...] = A100_40GB_PROFILES,
            health: bool = True) -> DeviceInfo:
    """An A100-40GB in ``mig`` mode as the device plugin registers it (count = most instances)."""
    return dev(uuid, 40960, count=7, index=index, mode="mig", type="NVIDIA A100-SXM4-40GB",
               health=health, profiles=profiles)


def node(name: str, *devices: DeviceInfo, cordoned: tuple[str, ...] = ()) -> NodeState:
    return NodeState(name, tuple(devices), frozenset(cordoned))


def res(gpu: int | str | None = 1, mem: int | str | None = None, cores: int | str | None = None,
        pct: int | str | None = None) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    for key, value in (("nvidia.com/gpu", gpu), ("nvidia.com/gpumem", mem), ("nvidia.com/gpucores", cores),
                       ("nvidia.com/gpumem-percentage", pct)):
        if value is not None:
            limits[key] = str(value)
    return {"resources": {"limits": limits}}


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (),
        annotations: dict[str, str] | None = None, uid: str = "uid-1", namespace: str = "default",
        name: str = "p1") -> dict[str, Any]:
    def named(prefix: str, items: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
        return [{"name": f"{prefix}{i}", **c} for i, c in enumerate(items)]

    return {
        "metadata": {"uid": uid, "namespace": namespace, "name": name, "annotations": annotations or {}},
        "spec": {"initContainers": named("init", init), "containers": named("c", containers)},
    }


def usage(*entries: tuple[str, str, int, int, int], namespace: str = "other") -> UsageIndex:
    """Usage from (node, uuid, slots, MiB, cores) entries, one holder pod per entry."""
    index = UsageIndex()
    for i, (node_name, uuid, slots, mem, cores) in enumerate(entries):
        index.add(PodAllocation(f"holder-{i}", namespace, f"holder-{i}", node_name,
                                (DeviceShare(uuid, mem, cores, slots),)))
    return index


def fit_one(devices: tuple[DeviceInfo, ...], container: dict[str, Any], *,
            used: tuple[tuple[str, int, int, int], ...] = (), annotations: dict[str, str] | None = None,
            gpu_policy: str = "spread", cordoned: tuple[str, ...] = ()) -> list[str] | str:
    """NVIDIA ``Fit`` alone (no node-level count check): chosen UUIDs in order, or the reason."""
    from hami.scheduler.engine.device_config import NvidiaConfig
    from hami.scheduler.engine.fit import PodContext, fit_devices
    from hami.scheduler.engine.policy import parse_gpu_policy, parse_scoring_weights
    from hami.scheduler.engine.requests import pod_request

    request = pod_request(pod(container, annotations=annotations), NvidiaConfig())
    assert request is not None and len(request.reqs) == 1
    req, options = request.reqs[0], request.options
    assert req is not None
    ctx = PodContext(request=request, policy=parse_gpu_policy(options.gpu_policy or gpu_policy),
                     weights=parse_scoring_weights(options.scoring_weights), quota=None)
    state = node("n", *devices, cordoned=cordoned)
    view = usage(*(("n", *u) for u in used)).view(state)
    picks = fit_devices(view, (view.used, view.umem, view.ucores), req, ctx, ())
    if isinstance(picks, str):
        return picks
    return [view.devs[p].id for p, _, _, _ in picks]
