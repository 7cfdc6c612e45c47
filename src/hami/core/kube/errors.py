"""Typed API errors, translated from ``ApiException`` and from transport failures.

Callers branch on the type (``Conflict`` → re-read and retry, ``NotFound`` → gone) instead of on
status numbers. ``status`` is 0 when no HTTP response came back (timeout, connection refused).
"""

from __future__ import annotations

import json
from typing import Any

import urllib3


class ApiError(Exception):
    """The API server refused a request, or no response came back (``status`` 0)."""

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")


class NotFound(ApiError):
    """404: the object does not exist."""


class Conflict(ApiError):
    """409: the resourceVersion precondition failed, or the object already exists."""


class Gone(ApiError):
    """410: the requested resourceVersion is too old (list/watch must start over)."""


class TransportError(ApiError):
    """No HTTP response: ``reason`` is ``Timeout`` or ``ConnectionError``."""


_BY_STATUS: dict[int, type[ApiError]] = {404: NotFound, 409: Conflict, 410: Gone}


def from_status(status: int, body: bytes | str | None, fallback_reason: str = "") -> ApiError:
    """Build the typed error for an HTTP error response, reading a ``Status`` body if there is one."""
    reason, message = fallback_reason, ""
    if body:
        try:
            doc: Any = json.loads(body)
        except ValueError:
            message = (body if isinstance(body, str) else body.decode("utf-8", "replace"))[:512]
        else:
            if isinstance(doc, dict):
                reason = str(doc.get("reason") or reason)
                message = str(doc.get("message") or "")
    return _BY_STATUS.get(status, ApiError)(status, reason or "Unknown", message)


def from_exception(exc: BaseException) -> ApiError:
    """Translate ``kubernetes.client.ApiException`` or a urllib3/socket error."""
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status > 0:
        return from_status(status, getattr(exc, "body", None), str(getattr(exc, "reason", "") or ""))
    return TransportError(0, "Timeout" if is_timeout(exc) else "ConnectionError", str(exc))


def is_timeout(exc: BaseException) -> bool:
    """True for a request that ran out of time (urllib3 wraps it in ``MaxRetryError``)."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        return is_timeout(exc.reason)
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        return False  # urllib3 derives "connection refused" from ConnectTimeoutError; it is not one
    return isinstance(exc, urllib3.exceptions.TimeoutError | TimeoutError)


def error_reason(exc: Exception) -> str:
    """A bounded label value for an API failure (``hami_kube_watch_errors_total``, the extender's
    ``hami_scheduler_api_errors_total``): the kind of refusal, never the message."""
    if isinstance(exc, Conflict):
        return "conflict"
    if isinstance(exc, NotFound):
        return "not_found"
    if isinstance(exc, Gone):
        return "gone"
    if isinstance(exc, TransportError):
        return "timeout" if exc.reason == "Timeout" else "connection"
    if isinstance(exc, ApiError) and exc.status > 0:
        return f"status_{exc.status}"
    if isinstance(exc, ApiError) and exc.reason == "ShortWatch":
        return "short_watch"
    return "decode"
