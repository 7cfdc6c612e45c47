"""The extender's HTTP API (§5.1–§5.2): POST /filter, /bind, /webhook; GET /healthz, /readyz.

With a webhook listener of its own (``--webhook-bind``), /webhook moves there (``make_webhook_app``),
so the main listener can require client certificates that the API server does not have.

Keys are Go field names (``Pod``, ``NodeNames``, ``FailedNodes``, ``Error``), read
case-insensitively like Go's decoder. A missing, undecodable, too deeply nested or wrongly typed
body (``bodies``) is answered 400 with a message, and one over 1 MiB 413 by the server before the
app sees it (HAMi truncates and answers 200 with ``Error``; kube-scheduler treats any of them as
an extender error). Errors from scheduling are HTTP 200 with ``Error``; so is a pod with negative
or impossible HAMi resource values, which HAMi would schedule (``container_problems``).

Section signs (§) refer to docs/design/scheduler.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from hami.core import klog
from hami.scheduler.engine.admission import AdmissionError, WebhookConfig, admit
from hami.scheduler.engine.requests import pod_problems
from hami.scheduler.extender import bodies
from hami.scheduler.extender.bind import BindArgs, Binder
from hami.scheduler.extender.filter_service import FilterService, node_items
from hami.scheduler.extender.state import ClusterState

log = klog.get_logger(__name__)

def field(obj: Mapping[str, Any], name: str) -> Any:
    """Go's case-insensitive struct field lookup (exact match first)."""
    if name in obj:
        return obj[name]
    lower = name.lower()
    for key, value in obj.items():
        if isinstance(key, str) and key.lower() == lower:
            return value
    return None


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body), status=status, mimetype="application/json")


def _bad_request(message: str) -> Response:
    return _json({"Error": message}, 400)


def _read_json() -> Any:
    """The request body as JSON, or a 400 Response (the server has bounded its size)."""
    data = request.get_data(cache=False)
    if not data:
        return _bad_request("Please send a request body")
    try:
        return bodies.decode(data)
    except bodies.BodyError as err:
        return _bad_request(str(err))


def _flask(name: str) -> Flask:
    app = Flask(name)

    @app.errorhandler(HTTPException)
    def _http_error(err: HTTPException) -> Response:
        return _json({"Error": err.description or err.name}, err.code or 500)

    @app.get("/healthz")
    def _healthz() -> Response:
        return Response(b"", status=200)

    return app


def _add_webhook(app: Flask, state: ClusterState, webhook: WebhookConfig) -> None:
    @app.post("/webhook")
    def _webhook() -> Response:
        review = _read_json()
        if isinstance(review, Response):
            return review
        try:
            bodies.check(review, bodies.ADMISSION_REVIEW, "AdmissionReview")
            with state.lock:
                return _json(admit(review, webhook, state.quotas))
        except (AdmissionError, bodies.BodyError) as err:
            return _bad_request(str(err))


def make_webhook_app(state: ClusterState, webhook: WebhookConfig) -> Flask:
    """/webhook and /healthz only: what the API server may reach."""
    app = _flask("hami-scheduler-webhook")
    _add_webhook(app, state, webhook)
    return app


def make_app(
    state: ClusterState, filters: FilterService, binder: Binder, webhook: WebhookConfig | None
) -> Flask:
    """/filter, /bind, /healthz, /readyz, and /webhook unless ``webhook`` is None (served apart)."""
    app = _flask("hami-scheduler")
    if webhook is not None:
        _add_webhook(app, state, webhook)

    @app.post("/filter")
    def _filter() -> Response:
        args = _read_json()
        if isinstance(args, Response):
            return args
        if not isinstance(args, Mapping):
            return _bad_request("ExtenderArgs must be a JSON object")
        pod = field(args, "Pod")
        if pod is None:
            return _json({"Error": "extender args missing pod"})
        names = field(args, "NodeNames")
        if (
            not isinstance(pod, dict)
            or not isinstance(names, list | None)
            or not set(map(type, names or [])) <= {str}
        ):
            return _bad_request("Pod must be an object and NodeNames a list of strings")
        nodes = field(args, "Nodes")
        items = None
        try:
            bodies.check(pod, bodies.POD, "Pod")
            if nodes is not None:  # §4.1 step 2: a nodeCacheCapable: false caller gets a dry run (§9.3)
                items = node_items(nodes)
                for i, node in enumerate(items):
                    bodies.check(node, bodies.NODE, f"Nodes.items[{i}]")
        except ValueError as err:  # BodyError included
            return _bad_request(str(err))
        problems = pod_problems(pod, filters.config.nvidia)
        if problems:
            message = "; ".join(problems)
            if items is None:  # a dry run writes nothing, events included
                filters.events.filtering(pod, [("Warning", message)])
            return _json({"Error": message})
        return _json(filters.filter(pod, names, items))

    @app.post("/bind")
    def _bind() -> Response:
        args = _read_json()
        if isinstance(args, Response):
            return args
        if not isinstance(args, Mapping):
            return _bad_request("ExtenderBindingArgs must be a JSON object")
        values = [field(args, k) for k in ("PodName", "PodNamespace", "PodUID", "Node")]
        if not all(isinstance(v, str) for v in values) or not values[0] or not values[3]:
            return _bad_request("ExtenderBindingArgs needs string PodName, PodNamespace, PodUID and Node")
        return _json({"Error": binder.bind(BindArgs(*values))})

    @app.get("/readyz")
    def _readyz() -> Response:
        log.v(5).info("readyz: leader=%s", binder.is_leader())
        return Response(b"", status=200)

    return app
