"""Instant queries against the Prometheus HTTP API (`/api/v1/query`), for hami-tune and hami-doctor."""

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

    def query(self, expr: str) -> list[Sample]:
        params = {"query": expr}
        if self.at is not None:
            params["time"] = f"{self.at:.3f}"
        url = f"{self.base_url}/api/v1/query"
        try:
            resp = self._http.get(url, params=params, timeout=self.timeout)
        except requests.RequestException as exc:
            raise PrometheusError(f"cannot reach Prometheus at {self.base_url}: {exc}") from exc
        try:
            body: dict[str, Any] = resp.json()
        except ValueError as exc:
            raise PrometheusError(f"{url} answered HTTP {resp.status_code} with a non-JSON body") from exc
        if body.get("status") != "success":
            raise PrometheusError(f"query {expr!r} failed: {body.get('errorType')}: {body.get('error')}")
        return parse_result(body.get("data", {}))


def parse_result(data: dict[str, Any]) -> list[Sample]:
    """Samples of an instant-query result (vector or scalar); NaN and +/-Inf are kept as floats."""
    kind = data.get("resultType")
    result = data.get("result")
    if kind == "scalar" and isinstance(result, list):
        return [Sample({}, float(result[1]))]
    if kind != "vector" or not isinstance(result, list):
        raise PrometheusError(f"unexpected result type {kind!r} for an instant query")
    return [Sample(dict(item.get("metric", {})), float(item["value"][1])) for item in result]
