"""The pod device-allocation string (§2.2).

``<UUID>,<Type>,<Usedmem>,<Usedcores>:`` per device, ``;`` after each container, init containers
first. Decoding keeps HAMi's empty trailing container (the final ``;`` opens one more piece).

Section signs (§) refer to docs/design/scheduler-annotations.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hami.core.codec.errors import CodecError
from hami.core.devices import ContainerDevice, ContainerDevices, PodDevices

MISSING_FIELDS = "pod annotation format error, missing fields, do not use nodeName in task spec"

_INT_RE = re.compile(r"[+-]?[0-9]+")
_INT32 = (-(2**31), 2**31 - 1)


def _int32(text: str, where: str) -> int:
    # Go strconv.ParseInt(s, 10, 32): optional sign, ASCII digits only, no spaces or underscores.
    if not _INT_RE.fullmatch(text):
        raise CodecError("expected a decimal int32", where, text)
    value = int(text)
    if not _INT32[0] <= value <= _INT32[1]:
        raise CodecError("value out of int32 range", where, text)
    return value


def _check_field(text: str, where: str) -> None:
    if any(sep in text for sep in ",:;"):
        raise CodecError("field cannot contain ',', ':' or ';'", where, text)


def encode_container_devices(devs: Iterable[ContainerDevice]) -> str:
    """``GPU-a,NVIDIA,1000,30:GPU-b,NVIDIA,1000,30:`` (empty for no devices)."""
    out = []
    for i, d in enumerate(devs):
        _check_field(d.uuid, f"device {i} uuid")
        _check_field(d.type, f"device {i} type")
        for name, value in (("usedmem", d.usedmem), ("usedcores", d.usedcores)):
            if not _INT32[0] <= value <= _INT32[1]:
                raise CodecError("value out of int32 range", f"device {i} {name}", value)
        out.append(f"{d.uuid},{d.type},{d.usedmem},{d.usedcores}:")
    return "".join(out)


def decode_container_devices(text: str, where: str = "container 0") -> ContainerDevices:
    """One container's devices. Segments without ``,`` are skipped; extra fields are ignored (as HAMi)."""
    if not isinstance(text, str):
        raise CodecError("pod devices must be a string", where, type(text).__name__)
    out = []
    for seg_no, seg in enumerate(text.split(":")):
        if "," not in seg:
            continue
        at = f"{where} segment {seg_no}"
        f = seg.split(",")
        if len(f) < 4:
            raise CodecError(MISSING_FIELDS, at, seg, message=f"{MISSING_FIELDS} ({at}: {seg!r})")
        out.append(
            ContainerDevice(
                uuid=f[0],
                type=f[1],
                usedmem=_int32(f[2], f"{at} usedmem"),
                usedcores=_int32(f[3], f"{at} usedcores"),
            )
        )
    return tuple(out)


def encode_pod_devices(pod: Iterable[Iterable[ContainerDevice]]) -> str:
    """Every container's devices followed by ``;`` (a container without devices gives just ``;``)."""
    return "".join(encode_container_devices(c) + ";" for c in pod)


def decode_pod_devices(text: str) -> PodDevices:
    """Split on ``;`` keeping empty pieces, so ``"a:;"`` is two containers, the last one empty."""
    if not isinstance(text, str):
        raise CodecError("pod devices must be a string", "pod devices", type(text).__name__)
    return tuple(decode_container_devices(piece, f"container {i}") for i, piece in enumerate(text.split(";")))
