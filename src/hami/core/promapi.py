"""The Prometheus HTTP API (``/api/v1/query`` and ``/api/v1/query_range``) for the tools that read
history: hami-tune's recommendations, hami-doctor's checks and its history snapshots."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


# What the pure code that reads Prometheus takes: a PromQL expression in, an instant vector out.
QueryFn = Callable[[str], list[Sample]]


@dataclass(frozen=True)
class Series:
    """One series of a range query: (unix seconds, value) points in time order."""

    labels: dict[str, str]
    points: tuple[tuple[float, float], ...]


class PrometheusError(RuntimeError):
    """Prometheus could not be reached or rejected a query; the message says which and why."""


class PrometheusClient:
    def __init__(self, base_url: str, timeout: float = 30.0, at: float | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.at = at  # evaluation time (unix seconds); None = Prometheus' now
        self._http = requests.Session()

    def close(self) -> None:
        self._http.close()

    def _get(self, path: str, params: dict[str, str], expr: str) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        try:
            resp = self._http.get(url, params=params, timeout=self.timeout)
        except requests.RequestException as exc:
            raise PrometheusError(f"cannot reach Prometheus at {self.base_url}: {exc}") from exc
        try:
            body = resp.json()
        except ValueError as exc:
            raise PrometheusError(f"{url} answered HTTP {resp.status_code} with a non-JSON body") from exc
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body if not isinstance(body, dict) else f"{body.get('errorType')}: {body.get('error')}"
            raise PrometheusError(f"query {expr!r} failed: {error}")
        data = body.get("data")
        return data if isinstance(data, dict) else {}

    def query(self, expr: str) -> list[Sample]:
        params = {"query": expr}
        if self.at is not None:
            params["time"] = f"{self.at:.3f}"
        return parse_result(self._get("/api/v1/query", params, expr))

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return parse_matrix(self._get("/api/v1/query_range", params, expr))


def parse_result(data: dict[str, Any]) -> list[Sample]:
    """Samples of an instant-query result (vector or scalar); NaN and +/-Inf are kept as floats."""
    kind = data.get("resultType")
    result = data.get("result")
    try:
        if kind == "scalar" and isinstance(result, list):
            return [Sample({}, float(result[1]))]
        if kind != "vector" or not isinstance(result, list):
            raise PrometheusError(f"unexpected result type {kind!r} for an instant query")
        return [Sample(dict(item.get("metric", {})), float(item["value"][1])) for item in result]
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise PrometheusError(f"malformed query result: {exc!r}") from None


def parse_matrix(data: dict[str, Any]) -> list[Series]:
    """Series of a range-query result."""
    result = data.get("result")
    if data.get("resultType") != "matrix" or not isinstance(result, list):
        raise PrometheusError(f"unexpected result type {data.get('resultType')!r} for a range query")
    try:
        return [
            Series(dict(item.get("metric", {})), tuple((float(t), float(v)) for t, v in item["values"]))
            for item in result
        ]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PrometheusError(f"malformed range result: {exc!r}") from None
