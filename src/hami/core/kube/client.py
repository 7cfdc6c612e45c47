"""The API client every daemon uses: the official ``ApiClient``, rate limited and instrumented.

``new_api_client`` returns a ``kubernetes.client.ApiClient`` (so ``CoreV1Api(client)`` and friends
work as usual) whose REST layer is ``LimitedRESTClient``. Every request, typed or raw, goes through
it, and so through the token bucket, the client-go metrics and the default timeout
(``--kube-timeout``; a call that passes its own ``_request_timeout`` keeps it: long watches must,
since the timeout bounds every socket read, and the ``Informer`` does).

As in client-go, the limiter wait comes before the request's timeout starts, so a throttled client
does not time out requests it has not sent yet. urllib3 retries are turned off: one counted request
is one HTTP attempt, and a timeout is not silently multiplied (client-go does not retry them either).
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client import rest
from prometheus_client import CollectorRegistry

from hami.core import klog
from hami.core.duration import format_duration
from hami.core.kube.metrics import ERROR_CODE, KubeMetrics, kube_metrics
from hami.core.kube.options import KubeOptions
from hami.core.kube.ratelimit import Clock, SystemClock, TokenBucket, effective_limits
from hami.core.kube.transport import HttpTransport, Response, Timeout, UnsupportedConfiguration

log = klog.get_logger(__name__)

# client-go logs throttling over 50 ms at -v=3, and over 1 s through a throttled logger: at most
# once a second at -v=2, else once every 10 s.
LONG_THROTTLE = 0.05
EXTRA_LONG_THROTTLE = 1.0


class KubeConfigError(Exception):
    """No usable cluster configuration was found."""


class LimitedRESTClient(rest.RESTClientObject):  # type: ignore[misc]
    """REST layer that waits for a token, applies the default timeout and records metrics."""

    def __init__(
        self,
        configuration: Any,
        limiter: TokenBucket | None,
        metrics: KubeMetrics,
        timeout: float | None,
        *,
        clock: Clock | None = None,
        transport: HttpTransport | None = None,
    ) -> None:
        super().__init__(configuration)
        self.transport = transport
        self._base_url = configuration.host
        self._netloc = urlsplit(configuration.host).netloc
        self.clock: Clock = clock or SystemClock()
        self.limiter = limiter
        self.metrics = metrics
        self.timeout = timeout
        self._log_lock = threading.Lock()
        self._last_extra_long_log = float("-inf")
        self._by_verb: dict[tuple[str, str], _Series] = {}

    def request(
        self,
        method: str,
        url: str,
        headers: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        """The generated client's REST call (typed APIs), over urllib3."""
        timeout = self.timeout if _request_timeout is None else _request_timeout
        series = self._series(method.upper(), urlsplit(url).netloc)
        start = self._throttle(series, url)
        status = ERROR_CODE
        try:
            response = super().request(
                method, url, headers=headers, body=body, post_params=post_params,
                _request_timeout=timeout,
            )
            status = str(response.status)
            return response
        finally:
            series.done(status, self.clock.monotonic() - start)

    def send(self, method: str, target: str, headers: Mapping[str, str], body: bytes | None,
             timeout: Timeout = None) -> Response:
        """One request over the lean transport (``raw`` uses it): ``target`` is the path and query."""
        assert self.transport is not None, "send() needs the lean transport"
        series = self._series(method, self._netloc)
        start = self._throttle(series, self._base_url + target)
        status = ERROR_CODE
        try:
            response = self.transport.request(
                method, target, headers, body, self.timeout if timeout is None else timeout
            )
            status = str(response.status)
            return response
        finally:
            series.done(status, self.clock.monotonic() - start)

    def close(self) -> None:
        super().close()
        if self.transport is not None:
            self.transport.close()

    def _series(self, verb: str, host: str) -> _Series:
        series = self._by_verb.get((verb, host))
        if series is None:  # a race only builds the same children twice
            series = self._by_verb[(verb, host)] = _Series(self.metrics, verb, host)
        return series

    def _throttle(self, series: _Series, url: str) -> float:
        """Wait for a token; returns when the call started. As in client-go, the request latency
        includes the limiter wait, and it ends at the response headers (the body is read later,
        by the caller; a watch is a long body)."""
        start = self.clock.monotonic()
        if self.limiter is None:
            series.limiter.observe(0.0)
            return start
        self.limiter.wait()
        waited = self.clock.monotonic() - start
        series.limiter.observe(waited)
        if waited <= LONG_THROTTLE:
            return start
        message = (
            f"Waited for {_go_duration(waited)} due to client-side throttling, "
            f"not priority and fairness, request: {series.verb}:{url}"
        )
        log.v(3).info("%s", message)
        if waited > EXTRA_LONG_THROTTLE:
            interval = 1.0 if klog.v(2) else 10.0
            with self._log_lock:
                now = self.clock.monotonic()
                if now - self._last_extra_long_log < interval:
                    return start
                self._last_extra_long_log = now
            log.info("%s", message)
        return start


class _Series:
    """The labelled series one verb and host write to, looked up once: ``labels()`` takes a lock
    and builds a key on every call, three times per request."""

    def __init__(self, metrics: KubeMetrics, verb: str, host: str) -> None:
        self.verb = verb
        self._host = host
        self._requests = metrics.requests
        self._duration = metrics.request_duration.labels(verb, host)
        self.limiter = metrics.rate_limiter_duration.labels(verb, host)
        self._by_code: dict[str, Any] = {}

    def done(self, code: str, seconds: float) -> None:
        """Count one attempt that ended with ``code`` (a status, or ``<error>``) after ``seconds``."""
        self._duration.observe(seconds)
        counter = self._by_code.get(code)
        if counter is None:
            counter = self._by_code[code] = self._requests.labels(code, self.verb, self._host)
        counter.inc()


def _go_duration(seconds: float) -> str:
    """A duration as Go prints one, to the millisecond ("1.234s", "150ms")."""
    return format_duration(timedelta(milliseconds=round(seconds * 1000)))


class _Configuration(k8s.Configuration):  # type: ignore[misc]
    """A ``Configuration`` on which assigning ``host`` its current value is a no-op.

    The kubeconfig and in-cluster loaders install a token refresh hook that re-assigns ``host``
    before every request, and the client's ``host`` setter re-reads the proxy settings from the
    whole environment each time (in a pod: every service's variables), all on the hot path.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        unchanged = self.__dict__.get("server_index", 0) is None and self.__dict__.get("_base_path") == value
        if name == "host" and unchanged:
            return
        super().__setattr__(name, value)


def load_configuration(opts: KubeOptions) -> Any:
    """A ``kubernetes.client.Configuration`` from the host, a kubeconfig file, or the pod's account."""
    cfg = _Configuration()
    if opts.host:
        cfg.host = opts.host.rstrip("/")
        return cfg
    path = opts.resolved_kubeconfig()
    if path:
        try:
            k8s_config.load_kube_config(
                config_file=path, context=opts.context, client_configuration=cfg, persist_config=False
            )
        except (k8s_config.ConfigException, OSError, ValueError) as err:
            raise KubeConfigError(f"kubeconfig {path}: {err}") from err
        return cfg
    try:
        k8s_config.load_incluster_config(client_configuration=cfg)
        return cfg
    except k8s_config.ConfigException as in_cluster_error:
        home = os.path.expanduser("~/.kube/config")
        if not os.path.exists(home):
            raise KubeConfigError(
                "no Kubernetes configuration: set --kubeconfig or $KUBECONFIG, or run in a pod "
                f"with a service account ({in_cluster_error})"
            ) from in_cluster_error
        k8s_config.load_kube_config(
            config_file=home, context=opts.context, client_configuration=cfg, persist_config=False
        )
        return cfg


def new_api_client(
    opts: KubeOptions,
    registry: CollectorRegistry | None = None,
    configuration: Any = None,
    clock: Clock | None = None,
) -> Any:
    """An ``ApiClient`` limited to ``opts.qps``/``opts.burst`` with ``opts.timeout`` on every request.

    Metrics go to ``registry`` (default: the global REGISTRY). ``configuration`` overrides the
    cluster lookup (it is copied, never modified). ``clock`` drives the limiter (tests).
    """
    cfg = load_configuration(opts) if configuration is None else copy.deepcopy(configuration)
    cfg.retries = urllib3.util.Retry(total=0, redirect=False)
    metrics = kube_metrics(registry)
    limits = effective_limits(opts.qps, opts.burst)
    limiter = None if limits is None else TokenBucket(*limits, clock=clock)
    metrics.qps.set(opts.qps if limits is None else limits[0])
    metrics.burst.set(opts.burst if limits is None else limits[1])
    api = k8s.ApiClient(cfg)
    api.rest_client.close()
    try:
        transport: HttpTransport | None = HttpTransport(cfg)
    except UnsupportedConfiguration as why:
        log.v(2).info("kube client: %s; every request goes through urllib3", why)
        transport = None
    api.rest_client = LimitedRESTClient(cfg, limiter, metrics, opts.timeout or None,
                                        clock=clock, transport=transport)
    api.user_agent = opts.user_agent
    return api
