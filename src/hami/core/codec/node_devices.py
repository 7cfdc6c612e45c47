"""``hami.io/node-nvidia-register`` and ``hami.io/node-nvidia-score`` (§1.1–§1.2).

The JSON form is Go's ``MarshalNodeDevices``: keys in struct order, every field omitempty, compact.
The legacy colon/comma form (≤ v2.7) is decoded and encoded for old nodes and logs.

One key is ours: ``memoryEnforcement`` (``driver``; omitted for HAMi-core), written last. HAMi's
``UnMarshalNodeDevices`` is ``json.Unmarshal`` into its ``DeviceInfo``, which has no such field (nor one
that folds to it), so HAMi's scheduler reads the annotation as before (docs/design/differences.md).

Section signs (§) refer to docs/design/scheduler-annotations.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from hami.core.annotations import NODE_REGISTER, VENDOR_NVIDIA
from hami.core.codec import gojson
from hami.core.codec.errors import CodecError
from hami.core.devices import MODE_HAMI_CORE, DeviceInfo, MigPlacement, MigProfile

NO_GPU_FOUND = "no gpu found on node"
ANNOS_NOT_FOUND = f"annos not found {NODE_REGISTER}"

_DEVICE_FIELDS = (
    "id",
    "index",
    "count",
    "devmem",
    "devcore",
    "type",
    "numa",
    "mode",
    "migProfiles",
    "migtemplate",
    "health",
    "devicevendor",
    "custominfo",
    "memoryEnforcement",
)
_PROFILE_FIELDS = ("name", "memoryMB", "core", "sliceCount", "placements")
_PLACEMENT_FIELDS = ("start", "size")


# ---- JSON ----------------------------------------------------------------------------------------


def _encode_profile(p: MigProfile) -> str:
    placements = ",".join(f'{{"start":{pl.start},"size":{pl.size}}}' for pl in p.placements)
    return (
        f'{{"name":{gojson.dump_str(p.name)},"memoryMB":{p.memory_mb},"core":{p.core},'
        f'"sliceCount":{p.slice_count},"placements":[{placements}]}}'
    )


def _encode_device(d: DeviceInfo) -> str:
    parts = [f'"id":{gojson.dump_str(d.id)}'] if d.id else []
    for key, value in (("index", d.index), ("count", d.count), ("devmem", d.devmem), ("devcore", d.devcore)):
        if value:
            parts.append(f'"{key}":{value}')
    if d.type:
        parts.append(f'"type":{gojson.dump_str(d.type)}')
    if d.numa:
        parts.append(f'"numa":{d.numa}')
    if d.mode:
        parts.append(f'"mode":{gojson.dump_str(d.mode)}')
    if d.mig_profiles:
        parts.append('"migProfiles":[' + ",".join(_encode_profile(p) for p in d.mig_profiles) + "]")
    if d.health:
        parts.append('"health":true')
    if d.enforcement:
        parts.append(f'"memoryEnforcement":{gojson.dump_str(d.enforcement)}')
    return "{" + ",".join(parts) + "}"


def _check_ranges(d: DeviceInfo, where: str) -> None:
    for name, value, bounds in (
        ("index", d.index, gojson.UINT64),
        ("count", d.count, gojson.INT32),
        ("devmem", d.devmem, gojson.INT32),
        ("devcore", d.devcore, gojson.INT32),
        ("numa", d.numa, gojson.INT64),
    ):
        if not bounds[0] <= value <= bounds[1]:
            raise CodecError(f"{name} out of range for the Go field", f"{where}.{name}", value)
    for j, p in enumerate(d.mig_profiles):
        values = [p.memory_mb, p.core, p.slice_count] + [
            v for pl in p.placements for v in (pl.start, pl.size)
        ]
        if any(not gojson.INT32[0] <= v <= gojson.INT32[1] for v in values):
            raise CodecError("MIG profile value out of int32 range", f"{where}.migProfiles[{j}]", p.name)


def encode_node_devices(devs: Iterable[DeviceInfo]) -> str:
    """Go ``MarshalNodeDevices``: ``[{"id":...,"index":1,...}]``; zero values are omitted."""
    out = []
    for i, d in enumerate(devs):
        _check_ranges(d, f"device[{i}]")
        out.append(_encode_device(d))
    return "[" + ",".join(out) + "]"


def _decode_placement(obj: Any, where: str) -> MigPlacement:
    vals = {"start": 0, "size": 0}
    for name, value in gojson.fields(obj, _PLACEMENT_FIELDS, where):
        if value is not None:
            vals[name] = gojson.as_int(value, f"{where}.{name}", gojson.INT32)
    return MigPlacement(start=vals["start"], size=vals["size"])


def _decode_profile(obj: Any, where: str) -> MigProfile:
    name = ""
    ints = {"memoryMB": 0, "core": 0, "sliceCount": 0}
    placements: list[MigPlacement] = []
    for key, value in gojson.fields(obj, _PROFILE_FIELDS, where):
        at = f"{where}.{key}"
        if value is None:
            continue
        if key == "name":
            name = gojson.as_str(value, at)
        elif key == "placements":
            placements = gojson.as_list(value, at, _decode_placement)
        else:
            ints[key] = gojson.as_int(value, at, gojson.INT32)
    return MigProfile(
        name=name,
        memory_mb=ints["memoryMB"],
        core=ints["core"],
        slice_count=ints["sliceCount"],
        placements=tuple(placements),
    )


_INT_BOUNDS = {
    "index": gojson.UINT64,
    "count": gojson.INT32,
    "devmem": gojson.INT32,
    "devcore": gojson.INT32,
    "numa": gojson.INT64,
}


def _decode_device(obj: Any, where: str) -> DeviceInfo:
    if obj is None:
        # Go would decode a nil *DeviceInfo and then dereference it; refuse instead.
        raise CodecError("device entry is null", where)
    vals: dict[str, Any] = {}
    for key, value in gojson.fields(obj, _DEVICE_FIELDS, where):
        at = f"{where}.{key}"
        if value is None:
            continue  # Go: null has no effect on a non-pointer field
        if key in _INT_BOUNDS:
            vals[key] = gojson.as_int(value, at, _INT_BOUNDS[key])
        elif key in ("id", "type", "mode", "devicevendor", "memoryEnforcement"):
            vals[key] = gojson.as_str(value, at)
        elif key == "health":
            vals[key] = gojson.as_bool(value, at)
        elif key == "migProfiles":
            vals[key] = tuple(gojson.as_list(value, at, _decode_profile))
        elif key == "custominfo" and not isinstance(value, gojson.Obj):
            raise CodecError(f"expected an object, got {gojson.kind(value)}", at, value)
        # migtemplate is deprecated and ignored.
    return DeviceInfo(
        id=vals.get("id", ""),
        index=vals.get("index", 0),
        count=vals.get("count", 0),
        devmem=vals.get("devmem", 0),
        devcore=vals.get("devcore", 0),
        type=vals.get("type", ""),
        numa=vals.get("numa", 0),
        mode=vals.get("mode", ""),
        health=vals.get("health", False),
        mig_profiles=vals.get("migProfiles", ()),
        device_vendor=vals.get("devicevendor", ""),
        enforcement=vals.get("memoryEnforcement", ""),
    )


def decode_node_devices(text: str) -> list[DeviceInfo]:
    """Go ``UnMarshalNodeDevices``: a JSON array of devices (``null`` = empty)."""
    where = NODE_REGISTER
    return gojson.as_list(gojson.loads(text, where), where, _decode_device)


def get_node_devices(annotations: Mapping[str, str], pair_scores: str | None = None) -> list[DeviceInfo]:
    """NVIDIA ``GetNodeDevices``: the register annotation decoded, vendor set, pair scores attached.

    Raises ``CodecError`` with HAMi's texts for a missing annotation and for an empty device list.
    """
    text = annotations.get(NODE_REGISTER)
    if text is None:
        raise CodecError(ANNOS_NOT_FOUND, NODE_REGISTER, message=ANNOS_NOT_FOUND)
    devs = decode_node_devices(text)
    if not devs:
        raise CodecError(NO_GPU_FOUND, NODE_REGISTER, text, message=NO_GPU_FOUND)
    scores = decode_pair_scores(pair_scores) if pair_scores is not None else {}
    return [replace(d, device_vendor=VENDOR_NVIDIA, pair_score=dict(scores.get(d.id, {}))) for d in devs]


def _decode_pair_entry(obj: Any, where: str) -> tuple[str, dict[str, int]]:
    uuid = ""
    score: dict[str, int] = {}
    for key, value in gojson.fields(obj, ("uuid", "score"), where):
        at = f"{where}.{key}"
        if value is None:
            continue
        if key == "uuid":
            uuid = gojson.as_str(value, at)
        else:
            if not isinstance(value, gojson.Obj):
                raise CodecError(f"expected an object, got {gojson.kind(value)}", at, value)
            for peer, s in value.pairs:
                score[peer] = gojson.as_int(s, f"{at}.{peer}", gojson.INT64)
    return uuid, score


def decode_pair_scores(text: str) -> dict[str, dict[str, int]]:
    """``[{"uuid":"GPU-0","score":{"GPU-1":100}}]`` → ``{"GPU-0": {"GPU-1": 100}}``; later entries win."""
    entries = gojson.as_list(
        gojson.loads(text, "hami.io/node-nvidia-score"), "hami.io/node-nvidia-score", _decode_pair_entry
    )
    return dict(entries)


def encode_pair_scores(scores: Mapping[str, Mapping[str, int]]) -> str:
    """The device plugin's ``hami.io/node-nvidia-score`` value (Go marshals map keys sorted)."""
    items = []
    for uuid, peers in scores.items():
        body = ",".join(f"{gojson.dump_str(p)}:{peers[p]}" for p in sorted(peers))
        items.append(f'{{"uuid":{gojson.dump_str(uuid)},"score":{{{body}}}}}')
    return "[" + ",".join(items) + "]"


# ---- legacy colon/comma form -----------------------------------------------------------------------

_INT_RE = re.compile(r"[+-]?[0-9]+")
_GO_BOOLS = {
    "1": True,
    "t": True,
    "T": True,
    "TRUE": True,
    "true": True,
    "True": True,
    "0": False,
    "f": False,
    "F": False,
    "FALSE": False,
    "false": False,
    "False": False,
}


def _legacy_int(text: str, where: str, bounds: tuple[int, int]) -> int:
    if not _INT_RE.fullmatch(text):
        raise CodecError("expected a decimal integer", where, text)
    value = int(text)
    if not bounds[0] <= value <= bounds[1]:
        raise CodecError(f"integer out of range [{bounds[0]}, {bounds[1]}]", where, text)
    return value


def decode_legacy_node_devices(text: str) -> list[DeviceInfo]:
    """``id,count,devmem,devcore,type,numa,health[,index,mode]:`` per device (§1.1 legacy form).

    Rules: the text must contain ``:``; empty segments are skipped; a non-empty segment must have
    7 or 9 comma fields. Numbers and bools are checked (HAMi ignored parse errors; we refuse them).
    """
    if not isinstance(text, str) or ":" not in text:
        raise CodecError("legacy node devices: no ':' separator", NODE_REGISTER, text)
    devs = []
    for seg_no, seg in enumerate(text.split(":")):
        if not seg:
            continue
        where = f"segment {seg_no}"
        if "," not in seg:
            raise CodecError("legacy node device has no ',' fields", where, seg)
        f = seg.split(",")
        if len(f) not in (7, 9):
            raise CodecError(f"legacy node device has {len(f)} fields, want 7 or 9", where, seg)
        health = _GO_BOOLS.get(f[6])
        if health is None:
            raise CodecError("expected a bool", f"{where} field 6 (health)", f[6])
        devs.append(
            DeviceInfo(
                id=f[0],
                count=_legacy_int(f[1], f"{where} field 1 (count)", gojson.INT32),
                devmem=_legacy_int(f[2], f"{where} field 2 (devmem)", gojson.INT32),
                devcore=_legacy_int(f[3], f"{where} field 3 (devcore)", gojson.INT32),
                type=f[4],
                numa=_legacy_int(f[5], f"{where} field 5 (numa)", gojson.INT64),
                health=health,
                index=_legacy_int(f[7], f"{where} field 7 (index)", gojson.UINT64) if len(f) == 9 else 0,
                mode=f[8] if len(f) == 9 else MODE_HAMI_CORE,
            )
        )
    return devs


def encode_legacy_node_devices(devs: Iterable[DeviceInfo]) -> str:
    """The 9-field legacy form, each device terminated by ``:``."""
    out = []
    for i, d in enumerate(devs):
        _check_ranges(d, f"device[{i}]")
        for name, value in (("id", d.id), ("type", d.type), ("mode", d.mode)):
            if "," in value or ":" in value:
                raise CodecError(
                    "legacy form cannot carry ',' or ':' in a field", f"device[{i}].{name}", value
                )
        health = "true" if d.health else "false"
        out.append(f"{d.id},{d.count},{d.devmem},{d.devcore},{d.type},{d.numa},{health},{d.index},{d.mode}:")
    return "".join(out)
