"""JSON the way Go's ``encoding/json`` reads and writes it, for struct-shaped wire values.

Decoding: object keys match struct fields exactly first, then case-insensitively (Go's fold);
duplicate keys keep the last; ``null`` leaves a field at its zero value; integers must be integer
literals within the Go type's range; NaN/Infinity are not JSON. Encoding: compact, non-ASCII kept,
``<``, ``>``, ``&``, U+2028 and U+2029 escaped as Go does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from hami.core.codec.errors import CodecError

T = TypeVar("T")

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT32 = (0, 2**32 - 1)
UINT64 = (0, 2**64 - 1)


@dataclass(frozen=True)
class Obj:
    """A JSON object with its key/value pairs in input order (duplicates kept)."""

    pairs: tuple[tuple[str, Any], ...]


class _Constant(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _reject_constant(name: str) -> Any:
    raise _Constant(name)


def loads(text: str, where: str) -> Any:
    """Parse JSON text; objects come back as ``Obj``. Any failure is a ``CodecError``."""
    if not isinstance(text, str):
        raise CodecError("JSON text must be a string", where, type(text).__name__)
    try:
        return json.loads(text, object_pairs_hook=lambda p: Obj(tuple(p)), parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise CodecError(
            f"invalid JSON: {exc.msg}", f"{where} offset {exc.pos}", text[exc.pos : exc.pos + 20]
        ) from None
    except _Constant as exc:
        # Python's parser gives no position here; the first occurrence is where Go would stop.
        raise CodecError(
            f"invalid JSON: {exc.name} is not a JSON value", f"{where} offset {text.find(exc.name)}", exc.name
        ) from None
    except (ValueError, RecursionError) as exc:
        raise CodecError(f"invalid JSON: {exc}", where) from None


def fold(name: str) -> str:
    """Go's case folding for field names: per rune, lower(upper(r)) when that stays one rune."""
    out = []
    for ch in name:
        up = ch.upper()
        low = up.lower() if len(up) == 1 else ch
        out.append(low if len(low) == 1 else up)
    return "".join(out)


def fields(obj: Any, names: tuple[str, ...], where: str) -> Iterator[tuple[str, Any]]:
    """Yield ``(struct field name, value)`` for every key of ``obj`` that names a field, in input order."""
    if not isinstance(obj, Obj):
        raise CodecError(f"expected a JSON object, got {kind(obj)}", where, obj)
    folded: dict[str, str] = {}
    for name in names:
        folded.setdefault(fold(name), name)
    for key, value in obj.pairs:
        if key in names:
            yield key, value
        else:
            match = folded.get(fold(key))
            if match is not None:
                yield match, value


def kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def as_int(value: Any, where: str, bounds: tuple[int, int]) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CodecError(f"expected an integer, got {kind(value)}", where, value)
    if isinstance(value, float):
        raise CodecError("expected an integer literal, got a fraction or exponent", where, value)
    lo, hi = bounds
    if not lo <= value <= hi:
        raise CodecError(f"integer out of range [{lo}, {hi}]", where, value)
    return value


def as_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise CodecError(f"expected a string, got {kind(value)}", where, value)
    return value


def as_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise CodecError(f"expected a bool, got {kind(value)}", where, value)
    return value


def as_list(value: Any, where: str, item: Callable[[Any, str], T]) -> list[T]:
    """A JSON array (``null`` = empty, as Go leaves a nil slice)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise CodecError(f"expected an array, got {kind(value)}", where, value)
    return [item(v, f"{where}[{i}]") for i, v in enumerate(value)]


_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def dump_str(value: str) -> str:
    """A JSON string literal byte-identical to Go's ``json.Marshal``."""
    out = json.dumps(value, ensure_ascii=False)
    for raw, esc in _GO_ESCAPES.items():
        out = out.replace(raw, esc)
    # Go replaces lone surrogates (invalid UTF-8) with U+FFFD.
    return out.encode("utf-8", "surrogatepass").decode("utf-8", "replace") if _has_surrogate(out) else out


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in text)
