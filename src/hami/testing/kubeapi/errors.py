"""Kubernetes `Status` failures, raised inside the emulator and written to the wire as-is."""

from __future__ import annotations

import re
from typing import Any

REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Gone",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """A request failure carrying exactly what the real API server would answer."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _details(kind: str, name: str, group: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": kind}
    if group:
        details["group"] = group
    return details


def _qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        404, f'{_qualified(plural, group)} "{name}" not found', "NotFound", _details(plural, name, group)
    )


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'{_qualified(plural, group)} "{name}" already exists',
        "AlreadyExists",
        _details(plural, name, group),
    )


def conflict(plural: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {_qualified(plural, group)} "{name}": {why}',
        "Conflict",
        _details(plural, name, group),
    )


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(kind: str, name: str, field: str, why: str) -> ApiError:
    return ApiError(
        422,
        f'{kind} "{name}" is invalid: {field}: {why}',
        "Invalid",
        {"name": name, "kind": kind, "causes": [{"reason": "FieldValueInvalid", "message": why,
                                                  "field": field}]},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")


def expired(requested: int, oldest: int) -> ApiError:
    return ApiError(410, f"too old resource version: {requested} ({oldest})", "Expired")


_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_LABEL}(\.{_LABEL})*"
_LABEL_NAMED = ("namespaces", "services")  # the kinds whose names are DNS labels, not subdomains


def invalid_name(key: str, name: str) -> str:
    """The API server's message when ``name`` is not a valid name for resource ``key`` ("" if it is)."""
    if key in _LABEL_NAMED:
        if len(name) <= 63 and re.fullmatch(_LABEL, name):
            return ""
        return (f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of lower case '
                "alphanumeric characters or '-', and must start and end with an alphanumeric character "
                f"(e.g. 'my-name',  or '123-abc', regex used for validation is '{_LABEL}')")
    if len(name) <= 253 and re.fullmatch(_SUBDOMAIN, name):
        return ""
    return (f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
            "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
            f"(e.g. 'example.com', regex used for validation is '{_SUBDOMAIN}')")
