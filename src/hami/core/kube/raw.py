"""JSON requests on an ``ApiClient`` that keep objects as plain dicts.

Used by the informer, the patch helpers and the event recorder: they go through the client's REST
layer (limiter, metrics, timeout, auth) but skip the model classes, so what comes back is the
API's JSON, and errors are the typed ones of ``errors``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import urllib3

from hami.core.kube import errors

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

Query = Sequence[tuple[str, str]]


def resource_path(group: str, version: str, plural: str, namespace: str | None = None,
                  name: str | None = None) -> str:
    """``/api/v1/...`` for the core group, ``/apis/<group>/<version>/...`` otherwise."""
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    return f"{base}/{name}" if name else base


def send(
    api_client: Any,
    method: str,
    path: str,
    *,
    query: Query = (),
    body: Any = None,
    content_type: str = JSON,
    timeout: Any = None,
) -> Any:
    """Send one request; return the open ``RESTResponse`` (2xx only) without reading its body.

    Raises the typed ``ApiError`` for an error status and ``TransportError`` when no response came.
    """
    headers = {"Accept": JSON}
    if body is not None:
        headers["Content-Type"] = content_type
    params = api_client.param_serialize(
        method=method,
        resource_path=path,
        query_params=list(query),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    try:
        response = api_client.call_api(*params, _request_timeout=timeout)
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise errors.from_exception(exc) from exc
    except Exception as exc:
        if getattr(exc, "status", None) is not None:  # ApiException from the REST layer
            raise errors.from_exception(exc) from exc
        raise
    if not 200 <= response.status <= 299:
        try:
            data = response.read()
        except (urllib3.exceptions.HTTPError, OSError):
            data = b""
        raise errors.from_status(response.status, data, response.reason or "")
    return response


def request_json(
    api_client: Any,
    method: str,
    path: str,
    *,
    query: Query = (),
    body: Any = None,
    content_type: str = JSON,
) -> Any:
    """Send one request and decode its JSON answer."""
    response = send(api_client, method, path, query=query, body=body, content_type=content_type)
    try:
        data = response.read()
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise errors.from_exception(exc) from exc
    try:
        return json.loads(data) if data else None
    except ValueError as exc:
        raise errors.ApiError(response.status, "BadJSON", f"undecodable response body: {exc}") from exc


def iter_lines(response: Any, chunk: int = 65536) -> Iterator[bytes]:
    """The newline-delimited lines of a streamed response body, as they arrive."""
    raw = response.response if hasattr(response, "response") else response
    buffer = b""
    while True:
        data = raw.read1(chunk)
        if not data:
            break
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def abort_response(response: Any) -> None:
    """Abort a streamed response from another thread (unblocks a reader stuck in ``read1``)."""
    raw = response.response if hasattr(response, "response") else response
    raw.shutdown()


def close_response(response: Any) -> None:
    """Close a response and hand its (possibly dead) connection back to the pool."""
    raw = response.response if hasattr(response, "response") else response
    try:
        raw.close()
    finally:
        raw.release_conn()
