"""The one error type every decoder in ``hami.core.codec`` raises."""

from __future__ import annotations

from typing import Any


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CodecError(ValueError):
    """A malformed wire value.

    ``what`` says what is wrong, ``where`` locates it (a field name, ``segment 2``, ``offset 17``...),
    ``value`` is the offending piece of input. ``str()`` carries all three so one log line is enough.
    """

    def __init__(self, what: str, where: str = "", value: Any = None, message: str | None = None) -> None:
        self.what = what
        self.where = where
        self.value = value
        if message is None:
            message = what
            if where:
                message += f" at {where}"
            if value is not None:
                message += f": {_short(value)}"
        super().__init__(message)
