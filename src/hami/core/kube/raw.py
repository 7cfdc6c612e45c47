"""JSON requests on an ``ApiClient`` that keep objects as plain dicts.

Every daemon reaches the API server through here: the informer, the patch helpers, the event
recorder, the scheduler's binds. Requests go through the client's REST layer (limiter, metrics,
timeout, auth) but skip the model classes, so what comes back is the API's JSON, and errors are
the typed ones of ``errors``. Bodies are encoded and decoded with orjson (a bind's two writes, two
events and every list page go through here): compact, UTF-8, and what Go's encoder emits too.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import quote, urlencode

import orjson
import urllib3

from hami.core.kube import errors
from hami.core.kube.client import LimitedRESTClient

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

Query = Sequence[tuple[str, str]]

# What sending or reading can raise when no usable response came back, on either path
# (http.client's protocol errors are not OSErrors).
TRANSPORT_ERRORS = (OSError, http.client.HTTPException, urllib3.exceptions.HTTPError)


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
    """Send one request; return the open response (2xx only) without reading its body.

    Raises the typed ``ApiError`` for an error status and ``TransportError`` when no response came.
    A client from ``new_api_client`` sends over its lean transport; any other ``ApiClient`` (a
    plain one, or ours behind a proxy) through the generated client and urllib3.
    """
    rest = getattr(api_client, "rest_client", None)
    if isinstance(rest, LimitedRESTClient) and rest.transport is not None:
        response = _send_lean(api_client, rest, method, path, query=query, body=body,
                              content_type=content_type, timeout=timeout)
    else:
        response = _send_generic(api_client, method, path, query=query, body=body,
                                 content_type=content_type, timeout=timeout)
    if not 200 <= response.status <= 299:
        try:
            data = response.read()
        except TRANSPORT_ERRORS:
            data = b""
        raise errors.from_status(response.status, data, response.reason or "")
    return response


def _send_lean(api_client: Any, rest: LimitedRESTClient, method: str, path: str, *, query: Query,
               body: Any, content_type: str, timeout: Any) -> Any:
    headers = dict(api_client.default_headers)
    headers["Accept"] = JSON
    auth = api_client.configuration.auth_settings().get("BearerToken")
    if auth and auth.get("value"):
        headers[auth["key"]] = auth["value"]
    data: bytes | None = None
    if body is not None:
        headers["Content-Type"] = content_type
        data = body if isinstance(body, bytes) else orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    target = quote(path) + ("?" + urlencode(list(query)) if query else "")
    try:
        return rest.send(method, target, headers, data, timeout)
    except TRANSPORT_ERRORS as exc:
        raise errors.from_exception(exc) from exc


def _send_generic(api_client: Any, method: str, path: str, *, query: Query, body: Any,
                  content_type: str, timeout: Any) -> Any:
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
        return api_client.call_api(*params, _request_timeout=timeout)
    except TRANSPORT_ERRORS as exc:
        raise errors.from_exception(exc) from exc
    except Exception as exc:
        if getattr(exc, "status", None) is not None:  # ApiException from the REST layer
            raise errors.from_exception(exc) from exc
        raise


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
    data = _read(response)
    try:
        return orjson.loads(data) if data else None
    except ValueError as exc:
        raise errors.ApiError(response.status, "BadJSON", f"undecodable response body: {exc}") from exc


def call(api_client: Any, method: str, path: str, *, body: Any = None, content_type: str = JSON) -> None:
    """Send one request whose answer is not needed (an event write: the server echoes the whole
    object back); the body is read, so the connection is reused, but not decoded."""
    _read(send(api_client, method, path, body=body, content_type=content_type))


def _read(response: Any) -> bytes:
    try:
        data: bytes = response.read()
    except TRANSPORT_ERRORS as exc:
        raise errors.from_exception(exc) from exc
    return data


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
