"""Device requests from pod specs (§3.2–§3.4): per-container requests and the user annotations.

Pods are the API's JSON as plain dicts. Every resource lookup is "limits first, then requests",
and a quantity counts only when it is an exact int64, as in HAMi ``GenerateResourceRequests``.
``pod_request`` decodes a pod once into the ``PodRequest`` that the filter, the ranking and the
pod patch share, and is where "this pod asks for no HAMi device" is decided.

Section signs (§) refer to docs/design/scheduler-filter.md.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from hami.core import annotations as ann
from hami.core.codec.errors import CodecError
from hami.core.codec.quantity import parse_quantity
from hami.core.objects import annotations_of, meta_field
from hami.scheduler.engine.device_config import NvidiaConfig

VENDOR: Final = ann.VENDOR_NVIDIA
PERCENT_UNSET: Final = 101  # HAMi's sentinel for "no gpumem-percentage"
_MAX_INT32: Final = 2**31 - 1
_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})  # Go strconv.ParseBool
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
CORES_MAX: Final = 100  # gpucores: a whole card


def int_quantity(value: object) -> int | None:
    """HAMi's ``Quantity.AsInt64``: the quantity as an exact int64, else None (``500m``, ``1.5``, junk)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if _INT64_MIN <= value <= _INT64_MAX else None
    if not isinstance(value, str):
        return None
    return _int_from_text(value)


# A pod's few quantity strings ("1", "2048") are parsed by the filter's check, its request, and the
# bind again: through Decimal each time, a dict hit once seen. Bounded: bodies are untrusted.
@functools.lru_cache(maxsize=1024)
def _int_from_text(value: str) -> int | None:
    try:
        amount = parse_quantity(value)
    except CodecError:
        return None
    if amount != amount.to_integral_value():
        return None
    result = int(amount)
    return result if _INT64_MIN <= result <= _INT64_MAX else None


@dataclass(frozen=True)
class ContainerRequest:
    """HAMi ``ContainerDeviceRequest`` for NVIDIA: ``nums`` cards, each with memory and cores."""

    nums: int
    memreq: int = 0  # MiB per card, already multiplied by memoryFactor
    mem_percentage: int = PERCENT_UNSET
    coresreq: int = 0
    type: str = VENDOR


@dataclass(frozen=True)
class PodOptions:
    """The user annotations of §3.4, parsed once per pod."""

    use_types: tuple[str, ...] = ()  # upper-cased, trimmed, empties dropped
    nouse_types: tuple[str, ...] = ()
    use_uuids: frozenset[str] = frozenset()
    nouse_uuids: frozenset[str] = frozenset()
    numa_bind: bool = False
    vgpu_mode: str | None = None
    node_policy: str | None = None
    gpu_policy: str | None = None
    scoring_weights: str | None = None
    memory_enforcement: str | None = None  # ours: hami.io/memory-enforcement

    @property
    def filters_type(self) -> bool:
        modes = (self.vgpu_mode, self.memory_enforcement)
        return bool(self.use_types or self.nouse_types or any(m is not None for m in modes))

    @property
    def filters_uuid(self) -> bool:
        return bool(self.use_uuids or self.nouse_uuids)

    def type_ok(self, model: str, mode: str, enforcement: str = "hami-core") -> bool:
        """HAMi ``CheckType`` + ``AllocateMode``: substring match on the upper-cased model; and ours, the
        card's memory enforcement against ``hami.io/memory-enforcement`` (a mismatch is
        CardTypeMismatch, as a mode mismatch is)."""
        if self.memory_enforcement is not None and enforcement != self.memory_enforcement.strip():
            return False
        upper = model.upper()
        if self.use_types and not any(t in upper for t in self.use_types):
            return False
        if any(t in upper for t in self.nouse_types):
            return False
        return self.vgpu_mode is None or mode in self.vgpu_mode

    def uuid_ok(self, uuid: str) -> bool:
        """HAMi ``CheckUUID``: exact match against the use/nouse lists."""
        if self.use_uuids and uuid not in self.use_uuids:
            return False
        return uuid not in self.nouse_uuids


def _resource(resources: Mapping[str, Any], name: str) -> object | None:
    for section in ("limits", "requests"):
        values = resources.get(section)
        if isinstance(values, Mapping) and name in values:
            found: object = values[name]
            return found
    return None


def container_request(container: object, cfg: NvidiaConfig) -> ContainerRequest | None:
    """The container's NVIDIA request, or None when it asks for no GPU (or asks in a form HAMi ignores)."""
    resources = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(resources, Mapping):
        return None
    nums = int_quantity(_resource(resources, cfg.resource_count_name))
    if nums is None or nums <= 0:
        return None
    factor = cfg.factor
    memnum = 0
    raw_mem = _resource(resources, cfg.resource_memory_name) if cfg.resource_memory_name else None
    if raw_mem is not None:
        mem = int_quantity(raw_mem)
        # HAMi drops the whole request when gpumem is not a small exact integer (e.g. "16Gi").
        if mem is None or mem < 0 or mem > _MAX_INT32 // factor:
            return None
        memnum = mem * factor
    percentage = PERCENT_UNSET
    pct = int_quantity(_resource(resources, cfg.resource_memory_percentage_name))
    if pct is not None:
        if pct > 100:
            percentage = 100
        elif pct > 0:
            percentage = pct
    if percentage == PERCENT_UNSET and memnum == 0:
        if cfg.default_memory != 0:
            memnum = cfg.default_memory
        else:
            percentage = 100
    cores = cfg.default_cores
    raw_cores = int_quantity(_resource(resources, cfg.resource_core_name))
    if raw_cores is not None:
        # HAMi clamps in Fit, after the checks that do not read cores; clamped here so the webhook's
        # quota pre-check, the score and the allocation see the same 100 (docs/design/differences.md).
        cores = min(raw_cores, CORES_MAX)
    return ContainerRequest(nums=nums, memreq=memnum, mem_percentage=percentage, coresreq=cores)


def _quantity(value: object) -> Decimal | None:
    """The quantity's exact value (a JSON number or Kubernetes text), None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(value) if Decimal(value).is_finite() else None
    if not isinstance(value, str):
        return None
    try:
        return parse_quantity(value)
    except CodecError:
        return None


def container_problems(container: Mapping[str, Any], cfg: NvidiaConfig) -> list[str]:
    """HAMi resource values of one container that cannot mean anything, as messages.

    Refused: text that is not a quantity (HAMi's decoder fails on the whole request), a negative
    value (HAMi takes ``gpucores: -50`` as asked), a value past int64 or, for the count and the
    cores, past int32 (HAMi wraps it into another number), a ``gpumem`` too large for int32 (HAMi
    silently schedules the pod as asking for no GPU). ``gpucores`` or ``gpumem-percentage`` above 100
    is not a problem: HAMi clamps both to 100 (``pod_clamps``; its webhook refuses the percentage, which
    ``hami.scheduler.engine.admission`` does too). A fraction is left to HAMi's rule (it does not count).
    """
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return []
    bounds: tuple[tuple[str, int | None, str], ...] = (
        (cfg.resource_count_name, _MAX_INT32, "overflows int32"),
        (cfg.resource_memory_name, _MAX_INT32 // cfg.factor, "is more than {most}"),
        (cfg.resource_memory_percentage_name, None, ""),  # HAMi clamps any int64 to 100
        (cfg.resource_core_name, _MAX_INT32, "overflows int32"),
    )
    problems = []
    who = f"container {container.get('name', '')}"
    for name, most, too_large in bounds:
        raw = _resource(resources, name) if name else None
        if raw is None:
            continue
        value = _quantity(raw)
        if value is None:
            problems.append(f"{who}: {name} {str(raw)[:64]!r} is not a quantity")
        elif value < 0:
            problems.append(f"{who}: {name} {raw} is negative")
        elif value > _INT64_MAX:
            problems.append(f"{who}: {name} {raw} overflows int64")
        elif most is not None and value > most and value == value.to_integral_value():
            problems.append(f"{who}: {name} {raw} " + too_large.format(most=most))
    return problems


def core_clamps(container: Mapping[str, Any], cfg: NvidiaConfig) -> list[str]:
    """``gpucores`` above 100 that the scheduler takes as 100, as HAMi's Fit does, as messages."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping) or not cfg.resource_core_name:
        return []
    cores = int_quantity(_resource(resources, cfg.resource_core_name))
    if cores is None or not CORES_MAX < cores <= _MAX_INT32:
        return []
    return [
        f"container {container.get('name', '')}: {cfg.resource_core_name} {cores} is more than "
        f"{CORES_MAX}, taken as {CORES_MAX} (a whole card), as HAMi does"
    ]


def percentage_clamps(container: Mapping[str, Any], cfg: NvidiaConfig) -> list[str]:
    """``gpumem-percentage`` above 100 that the filter takes as 100, as HAMi's
    ``GenerateResourceRequests`` does (a pod that skipped the webhook, which refuses it), as messages."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping) or not cfg.resource_memory_percentage_name:
        return []
    pct = int_quantity(_resource(resources, cfg.resource_memory_percentage_name))
    if pct is None or pct <= 100:
        return []
    return [
        f"container {container.get('name', '')}: {cfg.resource_memory_percentage_name} {pct} is more "
        "than 100, taken as 100 (the whole card's memory), as HAMi does"
    ]


@dataclass(frozen=True)
class Clamps:
    """What the filter changed in a pod's request, as messages, init containers first."""

    cores: tuple[str, ...]
    percentage: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.cores or self.percentage)


def pod_clamps(pod: Mapping[str, Any], cfg: NvidiaConfig) -> Clamps:
    """``core_clamps`` and ``percentage_clamps`` of every container."""
    every = _every_container(pod)
    return Clamps(
        tuple(p for c in every for p in core_clamps(c, cfg)),
        tuple(p for c in every for p in percentage_clamps(c, cfg)),
    )


def pod_problems(pod: Mapping[str, Any], cfg: NvidiaConfig) -> list[str]:
    """``container_problems`` of every container, init containers first."""
    return [p for c in _every_container(pod) for p in container_problems(c, cfg)]


def _every_container(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return []
    every = (*_containers(spec, "initContainers"), *_containers(spec, "containers"))
    return [c for c in every if isinstance(c, Mapping)]


def _containers(spec: Mapping[str, Any], key: str) -> Sequence[object]:
    items = spec.get(key)
    return items if isinstance(items, list) else []


Requests = tuple[ContainerRequest | None, ...]


def pod_requests(pod: Mapping[str, Any], cfg: NvidiaConfig) -> tuple[Requests, int]:
    """Requests per container, init containers first (HAMi ``Resourcereqs``), and the init count."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return (), 0
    init = _containers(spec, "initContainers")
    regular = _containers(spec, "containers")
    reqs = tuple(container_request(c, cfg) for c in (*init, *regular))
    return reqs, len(init)


def webhook_limits(container: Mapping[str, Any], cfg: NvidiaConfig) -> dict[str, int]:
    """Limits HAMi's admission webhook injects (§3.3, docs/design/scheduler-extender.md §8): ``defaultGPUNum``
    and exclusive cores.

    ``nvidia.com/gpu: 1`` alone becomes an exclusive card (gpucores 100); a gpumem request or a
    percentage below 100 stays shareable. The scheduler reads pods after this mutation.
    """
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return {}
    limits = resources.get("limits")
    limits = limits if isinstance(limits, Mapping) else {}
    out: dict[str, int] = {}
    has_gpu = _resource(resources, cfg.resource_count_name) is not None
    if cfg.resource_count_name not in limits and cfg.default_gpu_num > 0:
        others = (cfg.resource_core_name, cfg.resource_memory_name, cfg.resource_memory_percentage_name)
        if any(name and name in limits for name in others):
            out[cfg.resource_count_name] = cfg.default_gpu_num
            has_gpu = True
    if has_gpu and _resource(resources, cfg.resource_core_name) is None:
        pct_raw = _resource(resources, cfg.resource_memory_percentage_name)
        if pct_raw is not None:
            exclusive = int_quantity(pct_raw) == 100
        else:
            exclusive = not cfg.resource_memory_name or _resource(resources, cfg.resource_memory_name) is None
        if exclusive:
            out[cfg.resource_core_name] = 100
    return out


def _split_types(value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return tuple(part.strip().upper() for part in value.split(",") if part.strip())


def _split_uuids(value: str | None) -> frozenset[str]:
    if value is None:
        return frozenset()
    return frozenset(part.strip() for part in value.split(",") if part.strip())


def pod_options(pod: Mapping[str, Any]) -> PodOptions:
    """Parse the pod's §3.4 annotations."""
    annos = annotations_of(pod)
    return PodOptions(
        use_types=_split_types(annos.get(ann.POD_USE_GPUTYPE)),
        nouse_types=_split_types(annos.get(ann.POD_NOUSE_GPUTYPE)),
        use_uuids=_split_uuids(annos.get(ann.POD_USE_GPUUUID)),
        nouse_uuids=_split_uuids(annos.get(ann.POD_NOUSE_GPUUUID)),
        numa_bind=annos.get(ann.POD_NUMA_BIND, "") in _TRUE,
        vgpu_mode=annos.get(ann.POD_VGPU_MODE),
        node_policy=annos.get(ann.POD_NODE_SCHEDULER_POLICY),
        gpu_policy=annos.get(ann.POD_GPU_SCHEDULER_POLICY),
        scoring_weights=annos.get(ann.POD_DEVICE_SCORING_WEIGHTS),
        memory_enforcement=annos.get(ann.POD_MEMORY_ENFORCEMENT),
    )


@dataclass(frozen=True)
class PodRequest:
    """A pod as the filter reads it, decoded once per filter call: identity, device requests
    (one per container, init containers first) and the §3.4 options."""

    uid: str
    namespace: str
    name: str
    reqs: Requests
    n_init: int
    options: PodOptions

    @property
    def locks_node(self) -> bool:
        """HAMi's NVIDIA ``LockNode`` condition: some app (not init) container asks for GPUs."""
        return any(req is not None for req in self.reqs[self.n_init:])


def pod_request(pod: Mapping[str, Any], cfg: NvidiaConfig) -> PodRequest | None:
    """The pod's HAMi request, or None when no container asks for a device (§4.1 step 1: the
    filter passes such a pod through untouched)."""
    reqs, n_init = pod_requests(pod, cfg)
    if not any(req is not None for req in reqs):
        return None
    return PodRequest(
        meta_field(pod, "uid"), meta_field(pod, "namespace"), meta_field(pod, "name"),
        reqs, n_init, pod_options(pod),
    )


def pod_quota_demand(reqs: Sequence[ContainerRequest | None], n_init: int) -> tuple[int, int]:
    """Webhook quota pre-check demand (§8 step 6): max(Σ app, max init) for memory and cores.

    Percentage-only requests count 0 memory here, as in HAMi.
    """
    app_mem = sum(r.memreq * r.nums for r in reqs[n_init:] if r is not None)
    app_cores = sum(r.coresreq * r.nums for r in reqs[n_init:] if r is not None)
    init_mem = max((r.memreq * r.nums for r in reqs[:n_init] if r is not None), default=0)
    init_cores = max((r.coresreq * r.nums for r in reqs[:n_init] if r is not None), default=0)
    return max(app_mem, init_mem), max(app_cores, init_cores)
