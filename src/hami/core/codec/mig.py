"""``hami.io/vgpu-mig-allocations`` (§2.4, docs/design/node-agent-monitor.md §B.4).

Section signs (§) refer to docs/design/scheduler-annotations.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hami.core.annotations import POD_MIG_ALLOCATIONS
from hami.core.codec import gojson
from hami.core.codec.errors import CodecError
from hami.core.devices import MigAllocation, MigPlacement

_FIELDS = (
    "containerIndex",
    "deviceIndex",
    "gpuUUID",
    "profile",
    "placement",
    "migUUID",
    "gpuInstanceID",
    "computeInstanceID",
)


def _placement(obj: Any, where: str) -> MigPlacement:
    vals = {"start": 0, "size": 0}
    for key, value in gojson.fields(obj, ("start", "size"), where):
        if value is not None:
            vals[key] = gojson.as_int(value, f"{where}.{key}", gojson.INT32)
    return MigPlacement(vals["start"], vals["size"])


def _allocation(obj: Any, where: str) -> MigAllocation:
    v: dict[str, Any] = {}
    for key, value in gojson.fields(obj, _FIELDS, where):
        at = f"{where}.{key}"
        if value is None:
            if key in ("gpuInstanceID", "computeInstanceID"):
                v.pop(key, None)  # pointer fields: null sets them to nil
            continue
        if key in ("containerIndex", "deviceIndex"):
            v[key] = gojson.as_int(value, at, gojson.INT64)
        elif key in ("gpuInstanceID", "computeInstanceID"):
            v[key] = gojson.as_int(value, at, gojson.UINT32)
        elif key == "placement":
            v[key] = _placement(value, at)
        else:
            v[key] = gojson.as_str(value, at)
    alloc = MigAllocation(
        container_index=v.get("containerIndex", 0),
        device_index=v.get("deviceIndex", 0),
        gpu_uuid=v.get("gpuUUID", ""),
        profile=v.get("profile", ""),
        placement=v.get("placement", MigPlacement(0, 0)),
        mig_uuid=v.get("migUUID", ""),
        gpu_instance_id=v.get("gpuInstanceID"),
        compute_instance_id=v.get("computeInstanceID"),
    )
    _validate(alloc, where)
    return alloc


def _validate(a: MigAllocation, where: str) -> None:
    if a.container_index < 0:
        raise CodecError("containerIndex must not be negative", f"{where}.containerIndex", a.container_index)
    if a.device_index < 0:
        raise CodecError("deviceIndex must not be negative", f"{where}.deviceIndex", a.device_index)
    if not a.gpu_uuid:
        raise CodecError("gpuUUID must not be empty", f"{where}.gpuUUID")
    if not a.profile:
        raise CodecError("profile must not be empty", f"{where}.profile")
    if a.placement.size <= 0:
        raise CodecError("placement size must be positive", f"{where}.placement.size", a.placement.size)
    identity = (bool(a.mig_uuid), a.gpu_instance_id is not None, a.compute_instance_id is not None)
    if any(identity) and not all(identity):
        raise CodecError("migUUID, gpuInstanceID and computeInstanceID must be set together", where)


def decode_mig_allocations(text: str) -> list[MigAllocation]:
    """Decode and validate; duplicate ``(containerIndex, deviceIndex)`` pairs are refused."""
    allocs = gojson.as_list(gojson.loads(text, POD_MIG_ALLOCATIONS), POD_MIG_ALLOCATIONS, _allocation)
    seen: set[tuple[int, int]] = set()
    for i, a in enumerate(allocs):
        key = (a.container_index, a.device_index)
        if key in seen:
            raise CodecError("duplicate (containerIndex, deviceIndex)", f"{POD_MIG_ALLOCATIONS}[{i}]", key)
        seen.add(key)
    return allocs


def encode_mig_allocations(allocs: Iterable[MigAllocation]) -> str:
    """Compact JSON; the runtime identity only when set."""
    out = []
    for i, a in enumerate(allocs):
        _validate(a, f"allocation[{i}]")
        body = (
            f'"containerIndex":{a.container_index},"deviceIndex":{a.device_index},'
            f'"gpuUUID":{gojson.dump_str(a.gpu_uuid)},"profile":{gojson.dump_str(a.profile)},'
            f'"placement":{{"start":{a.placement.start},"size":{a.placement.size}}}'
        )
        if a.mig_uuid:
            body += (
                f',"migUUID":{gojson.dump_str(a.mig_uuid)},"gpuInstanceID":{a.gpu_instance_id},'
                f'"computeInstanceID":{a.compute_instance_id}'
            )
        out.append("{" + body + "}")
    return "[" + ",".join(out) + "]"
