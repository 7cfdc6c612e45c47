"""API-client metrics under client-go's names, plus hami's informer and event-recorder series.

Names, labels and buckets are client-go's (k8s.io/component-base/metrics/prometheus/restclient), so
the queries of docs/guides/tuning.md §2.1 work unchanged:

- ``rest_client_requests_total{code,method,host}``: one per HTTP attempt; ``code`` is the status, or
  ``<error>`` when no response came back (timeout, connection refused, TLS failure);
- ``rest_client_request_duration_seconds{verb,host}``: from the start of the call (limiter wait
  included, as in client-go) to the response headers; body transfer is not included;
- ``rest_client_rate_limiter_duration_seconds{verb,host}``: time spent waiting for a token,
  observed for every request (0 when a token was there).

One ``KubeMetrics`` exists per registry: every client, informer and recorder built on the same
registry shares it, so a second client never trips prometheus-client's duplicate check.
"""

from __future__ import annotations

import threading
import weakref

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

# client-go's buckets for both latency histograms.
CLIENT_GO_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

ERROR_CODE = "<error>"


class KubeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "method", "host"],
            registry=registry,
        )
        self.request_duration = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            ["verb", "host"],
            buckets=CLIENT_GO_BUCKETS,
            registry=registry,
        )
        self.rate_limiter_duration = Histogram(
            "rest_client_rate_limiter_duration_seconds",
            "Client side rate limiter latency in seconds. Broken down by verb, and host.",
            ["verb", "host"],
            buckets=CLIENT_GO_BUCKETS,
            registry=registry,
        )
        self.qps = Gauge(
            "hami_kube_client_qps",
            "Configured API-client QPS (--kube-qps); negative means no client-side limit.",
            registry=registry,
        )
        self.burst = Gauge(
            "hami_kube_client_burst",
            "Configured API-client burst (--kube-burst).",
            registry=registry,
        )
        self.watch_errors = Counter(
            "hami_kube_watch_errors_total",
            "List/watch failures of the informers, by resource and reason "
            "(gone, timeout, connection, decode, status_<code>).",
            ["resource", "reason"],
            registry=registry,
        )
        self.informer_synced = Gauge(
            "hami_kube_informer_synced",
            "1 once the informer's cache holds a complete list of the resource.",
            ["resource"],
            registry=registry,
        )
        self.informer_handler_errors = Counter(
            "hami_kube_informer_handler_errors_total",
            "Exceptions raised by informer event handlers (the event is skipped).",
            ["resource"],
            registry=registry,
        )
        self.events = Counter(
            "hami_kube_events_total",
            "Kubernetes Events recorded, by result (created, aggregated, dropped, error).",
            ["result"],
            registry=registry,
        )


_lock = threading.Lock()
_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, KubeMetrics] = weakref.WeakKeyDictionary()


def kube_metrics(registry: CollectorRegistry | None = None) -> KubeMetrics:
    """The metrics registered on ``registry`` (default: prometheus-client's global REGISTRY)."""
    reg = REGISTRY if registry is None else registry
    with _lock:
        found = _by_registry.get(reg)
        if found is None:
            found = KubeMetrics(reg)
            _by_registry[reg] = found
        return found
