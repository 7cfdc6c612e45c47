"""Kubernetes resource quantities (``resource.ParseQuantity``), exact, as ``Decimal``.

Grammar: ``[+-]digits[.digits]`` (or ``digits.`` / ``.digits``) then one suffix: binary
``Ki Mi Gi Ti Pi Ei``, decimal ``m k M G T P E`` or none, or an exponent ``e<int>`` / ``E<int>``.
"""

from __future__ import annotations

import re
from decimal import Context, Decimal, DecimalException, localcontext

from hami.core.codec.errors import CodecError

_RE = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Kubernetes caps quantities far below this; it keeps Decimal arithmetic exact and bounded.
_MAX_EXPONENT = 1000


def parse_quantity(text: str) -> Decimal:
    """``"1.5Gi"`` → ``Decimal(1610612736)``; ``"100m"`` → ``Decimal("0.1")``; anything else → CodecError."""
    if not isinstance(text, str):
        raise CodecError("quantity must be a string", "quantity", type(text).__name__)
    m = _RE.fullmatch(text)
    if m is None:
        raise CodecError(
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            "quantity",
            text,
        )
    number, suffix = m.group(1), m.group(2) or ""
    exp = 0
    if suffix in _DECIMAL:
        exp = _DECIMAL[suffix]
    elif suffix and suffix not in _BINARY:  # e<int> / E<int>
        exp = int(suffix[1:])
    if abs(exp) > _MAX_EXPONENT:
        raise CodecError(f"quantity exponent beyond ±{_MAX_EXPONENT}", "quantity", text)
    try:
        with localcontext(Context(prec=len(number) + 64, Emax=10 * _MAX_EXPONENT, Emin=-10 * _MAX_EXPONENT)):
            value = Decimal(number).scaleb(exp)
            if suffix in _BINARY:
                value *= Decimal(1024) ** _BINARY[suffix]
            return value + 0  # normalises -0 and applies the context
    except DecimalException as exc:
        raise CodecError(f"quantity not representable: {exc!r}", "quantity", text) from None
