"""Exact-integer Kubernetes quantities, as HAMi reads them with ``Quantity.AsInt64``.

HAMi accepts a device resource only when its quantity is an exact int64 (``16Gi`` is, ``1.5`` or
``500m`` is not). Only that question matters to the scheduler, so this answers it and nothing more.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def int_quantity(value: object) -> int | None:
    """The quantity as an exact int64, or None when it is malformed, fractional or out of range."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if _INT64_MIN <= value <= _INT64_MAX else None
    if not isinstance(value, str):
        return None
    m = _QUANTITY.match(value.strip())
    if m is None:
        return None
    number, exponent, suffix = m.groups()
    try:
        amount = Decimal(number)
        if exponent is not None:
            amount = amount.scaleb(int(exponent[1:]))
        elif suffix in _BINARY:
            amount *= _BINARY[suffix]
        elif suffix is not None:
            amount = amount.scaleb(_DECIMAL[suffix])
    except InvalidOperation:
        return None
    if amount != amount.to_integral_value():
        return None
    result = int(amount)
    return result if _INT64_MIN <= result <= _INT64_MAX else None
