"""The extender's request bodies, decoded and checked at the edge, before any engine code reads them.

Anyone who reaches a listener can send anything, so a body is refused with a message (HTTP 400)
unless it is JSON nested at most ``MAX_DEPTH`` deep and every field the engine reads has the JSON
type Kubernetes gives it. ``null`` is accepted for a field (Go decodes it as the zero value), not
for a list item or a map value; fields the engine does not read are not checked. A shape is data:
a type (or tuple of types), an object's known fields as a dict, or ``Each`` for the items of a list
or the values of a map.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

MAX_DEPTH: Final = 64  # a Pod is about 10 deep; a KubeSchedulerConfiguration caller never nests more


_TOO_DEEP: Final = f"invalid JSON: nested more than {MAX_DEPTH} levels"


class BodyError(ValueError):
    """The body is unusable; ``str()`` says what and where, for the 400 answer."""


@dataclass(frozen=True)
class Each:
    """Every item of a list, or with ``mapping`` every value of an object."""

    item: Shape
    mapping: bool = False


Shape = type | tuple[type, ...] | dict[str, "Shape"] | Each

_QUANTITY: Final = (str, int, float)
_STRINGS: Final = Each(str, mapping=True)
_CONTAINER: Final[Shape] = {
    "name": str,
    "resources": {"limits": Each(_QUANTITY, mapping=True), "requests": Each(_QUANTITY, mapping=True)},
    "env": Each({"name": str, "value": str}),
    "securityContext": {"privileged": bool},
}
_META: Final[Shape] = {
    "name": str, "namespace": str, "uid": str, "resourceVersion": str,
    "annotations": _STRINGS, "labels": _STRINGS,
}
POD: Final[Shape] = {
    "metadata": _META,
    "spec": {
        "schedulerName": str, "nodeName": str, "runtimeClassName": str,
        "containers": Each(_CONTAINER), "initContainers": Each(_CONTAINER),
    },
    "status": {"phase": str},
}
NODE: Final[Shape] = {
    "metadata": _META,
    "status": {"allocatable": Each(_QUANTITY, mapping=True), "capacity": Each(_QUANTITY, mapping=True)},
}
ADMISSION_REVIEW: Final[Shape] = {
    "apiVersion": str, "kind": str, "request": {"uid": str, "namespace": str, "object": POD},
}

_NAMES: Final = {str: "a string", int: "a number", float: "a number", bool: "a boolean", dict: "an object",
                 list: "a list"}


def decode(data: bytes) -> Any:
    """The JSON of ``data``; ``BodyError`` for undecodable or too deeply nested input.

    orjson, not ``json``: a /filter body names every node, and the decode is a fixed share of each
    pod's CPU. It reads UTF-8 only (Kubernetes sends nothing else) and refuses what Go's decoder
    refuses too (NaN, integers beyond 64 bits); its own nesting limit (1,024) is above ours.
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        if "depth limit" in str(err):
            raise BodyError(_TOO_DEEP) from None
        raise BodyError(f"invalid JSON: {err}") from None
    if _too_deep(value):
        raise BodyError(_TOO_DEEP)
    return value


def _too_deep(value: Any) -> bool:
    """Whether ``value`` nests more than ``MAX_DEPTH`` levels; only objects and lists are visited
    (the /filter body's thousand node names are not)."""
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(MAX_DEPTH):
        if not level:
            return False
        below: list[Any] = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item
            if isinstance(item, list) and all_strings(item):
                continue  # a list of node names
            below.extend([c for c in children if isinstance(c, dict | list)])
        level = below
    return bool(level)


def all_strings(items: list[Any]) -> bool:
    """Whether every item is a string: ``str.join`` checks each one in C, several times faster
    than a Python-level pass over a /filter body's thousand node names."""
    try:
        "".join(items)
    except TypeError:
        return False
    return True


def _name(shape: Shape) -> str:
    if isinstance(shape, Each):
        return "an object" if shape.mapping else "a list"
    if isinstance(shape, dict):
        return "an object"
    kinds = shape if isinstance(shape, tuple) else (shape,)
    return " or ".join(dict.fromkeys(_NAMES[k] for k in kinds))


def _fits(value: Any, shape: Shape) -> bool:
    if isinstance(shape, Each):
        return isinstance(value, dict if shape.mapping else list)
    if isinstance(shape, dict):
        return isinstance(value, dict)
    if isinstance(value, bool):  # a JSON true is no number
        return shape is bool or (isinstance(shape, tuple) and bool in shape)
    return isinstance(value, shape)


def check(value: Any, shape: Shape, where: str) -> None:
    """Raise ``BodyError`` naming the first field of ``value`` that does not fit ``shape``."""
    # (value, shape, where, whether null is fine: for a field, not for a list item or map value)
    stack: list[tuple[Any, Shape, str, bool]] = [(value, shape, where, False)]
    while stack:
        item, expected, path, nullable = stack.pop()
        if item is None and nullable:
            continue
        if not _fits(item, expected):
            raise BodyError(f"{path} must be {_name(expected)}, not {json.dumps(item)[:40]}")
        if isinstance(expected, Each):
            pairs = item.items() if isinstance(item, Mapping) else enumerate(item)
            stack.extend((child, expected.item, f"{path}[{key!r}]", False) for key, child in pairs)
        elif isinstance(expected, dict):
            stack.extend(
                (item[key], sub, f"{path}.{key}", True) for key, sub in expected.items() if key in item
            )
