"""The extender's HTTP API (§5.1–§5.2): POST /filter, /bind, /webhook; GET /healthz, /readyz.

With a webhook listener of its own (``--webhook-bind``), /webhook moves there (``make_webhook_app``),
so the main listener can require client certificates that the API server does not have.

Keys are Go field names (``Pod``, ``NodeNames``, ``FailedNodes``, ``Error``), read
case-insensitively like Go's decoder. A missing, undecodable, too deeply nested or wrongly typed
body (``bodies``) is answered 400 with a message, and one over 1 MiB 413 by the server before the
app sees it (HAMi truncates and answers 200 with ``Error``; kube-scheduler treats any of them as
an extender error). Errors from scheduling are HTTP 200 with ``Error``; so is a pod with negative
or impossible HAMi resource values, which HAMi would schedule (``container_problems``). A
``gpucores`` or ``gpumem-percentage`` above 100 is placed as 100, as HAMi does, with a Warning
event once per pod (``pod_clamps``).

Section signs (§) refer to docs/design/scheduler-extender.md.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import orjson
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from hami.core import klog, tracing
from hami.core.serve.guard import Direct, Environ, StartResponse, WSGIApp
from hami.scheduler.engine.admission import AdmissionError, WebhookConfig, admit
from hami.scheduler.engine.requests import pod_clamps, pod_problems
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
        return _bad_request(_NO_BODY)
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
        span, annotations = tracing.webhook_span(_review_namespace(review))
        try:
            bodies.check(review, bodies.ADMISSION_REVIEW, "AdmissionReview")
            with state.lock:
                answer = admit(review, webhook, state.quotas, annotations)
        except (AdmissionError, bodies.BodyError) as err:
            tracing.end(span, str(err))
            return _bad_request(str(err))
        if span is not None:
            response = answer["response"]
            refused = "" if response["allowed"] else response["status"].get("message", "refused")
            tracing.end(span, refused, {"hami.webhook.patched": "patch" in response})
        return _json(answer)


def _review_namespace(review: Any) -> str:
    """The namespace an AdmissionReview's pod is created in ("" when the body has none)."""
    request = review.get("request") if isinstance(review, Mapping) else None
    namespace = request.get("namespace") if isinstance(request, Mapping) else None
    return namespace if isinstance(namespace, str) else ""


def make_webhook_app(state: ClusterState, webhook: WebhookConfig) -> Flask:
    """/webhook and /healthz only: what the API server may reach."""
    app = _flask("hami-scheduler-webhook")
    _add_webhook(app, state, webhook)
    return app


Reply = tuple[int, Any]  # (HTTP status, JSON body)

_JSON: Final = "application/json"
_NO_BODY: Final = "Please send a request body"
_STATUS: Final = {200: "200 OK", 400: "400 Bad Request", 500: "500 Internal Server Error"}


def filter_reply(filters: FilterService, args: Any) -> Reply:
    """POST /filter on a decoded ExtenderArgs."""
    if not isinstance(args, Mapping):
        return 400, {"Error": "ExtenderArgs must be a JSON object"}
    pod = field(args, "Pod")
    if pod is None:
        return 200, {"Error": "extender args missing pod"}
    names = field(args, "NodeNames")
    if (
        not isinstance(pod, dict)
        or not (names is None or (isinstance(names, list) and bodies.all_strings(names)))
    ):
        return 400, {"Error": "Pod must be an object and NodeNames a list of strings"}
    nodes = field(args, "Nodes")
    items = None
    try:
        bodies.check(pod, bodies.POD, "Pod")
        # docs/design/scheduler-filter.md §4.1 step 2: a nodeCacheCapable: false caller gets a dry run
        # (docs/design/scheduler.md §9.3)
        if nodes is not None:
            items = node_items(nodes)
            for i, node in enumerate(items):
                bodies.check(node, bodies.NODE, f"Nodes.items[{i}]")
    except ValueError as err:  # BodyError included
        return 400, {"Error": str(err)}
    problems = pod_problems(pod, filters.config.nvidia)
    if problems:
        message = "; ".join(problems)
        if items is None:  # a dry run writes nothing, events included
            filters.events.filtering(pod, [("Warning", message)])
        return 200, {"Error": message}
    clamps = pod_clamps(pod, filters.config.nvidia)
    if clamps and items is None:
        filters.events.clamped(pod, clamps)
    return 200, filters.filter(pod, names, items)


def bind_reply(binder: Binder, args: Any) -> Reply:
    """POST /bind on a decoded ExtenderBindingArgs."""
    if not isinstance(args, Mapping):
        return 400, {"Error": "ExtenderBindingArgs must be a JSON object"}
    values = [field(args, k) for k in ("PodName", "PodNamespace", "PodUID", "Node")]
    if not all(isinstance(v, str) for v in values) or not values[0] or not values[3]:
        return 400, {"Error": "ExtenderBindingArgs needs string PodName, PodNamespace, PodUID and Node"}
    return 200, {"Error": binder.bind(BindArgs(*values))}


def _answer(path: str, handler: Callable[[Any], Reply], data: bytes) -> tuple[int, str, bytes]:
    """(status, content type, body) of the hot route ``path`` for the request body ``data``."""
    try:
        status, reply = handler(bodies.decode(data)) if data else (400, {"Error": _NO_BODY})
    except bodies.BodyError as err:
        status, reply = 400, {"Error": str(err)}
    except Exception:  # what Flask answered too: a 500 with a line, the traceback in the log
        log.error("POST %s failed", path, exc_info=True)
        status, reply = 500, {"Error": "internal error; see the extender's log"}
    return status, _JSON, orjson.dumps(reply)


def hot_routes(filters: FilterService, binder: Binder) -> dict[str, Direct]:
    """POST /filter and /bind, two requests for every pod kube-scheduler places, served without
    Flask or the WSGI layer (``serve_wsgi(direct=...)``): its request and response objects,
    routing and signals cost more CPU per pod than the filter itself."""
    return {
        "/filter": functools.partial(_answer, "/filter", functools.partial(filter_reply, filters)),
        "/bind": functools.partial(_answer, "/bind", functools.partial(bind_reply, binder)),
    }


def make_app(
    state: ClusterState, filters: FilterService, binder: Binder, webhook: WebhookConfig | None
) -> WSGIApp:
    """/filter, /bind, /healthz, /readyz, and /webhook unless ``webhook`` is None (served apart).

    POST /filter and /bind are ``hot_routes``, answered here too for a server that does not take
    them directly (one with basic auth); every other request, those paths with another method
    included, goes to Flask.
    """
    app = _flask("hami-scheduler")
    if webhook is not None:
        _add_webhook(app, state, webhook)

    @app.get("/readyz")
    def _readyz() -> Response:
        log.v(5).info("readyz: leader=%s", binder.is_leader())
        return Response(b"", status=200)

    # Flask answers 405 for another method on these paths (with Allow: POST, as before).
    app.add_url_rule("/filter", "filter", _never, methods=["POST"])
    app.add_url_rule("/bind", "bind", _never, methods=["POST"])
    hot = hot_routes(filters, binder)

    def routed(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        handler = hot.get(environ.get("PATH_INFO", ""))
        if handler is None or environ.get("REQUEST_METHOD") != "POST":
            return app(environ, start_response)
        status, content_type, body = handler(environ["wsgi.input"].read())  # whole, and bounded
        start_response(_STATUS[status], [("Content-Type", content_type), ("Content-Length", str(len(body)))])
        return [body]

    return routed


def _never() -> Response:
    raise AssertionError("POST /filter and /bind are answered before Flask")
