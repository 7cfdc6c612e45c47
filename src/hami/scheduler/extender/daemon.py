"""Wiring of the extender daemon: API client, caches, register loop, leadership, HTTP servers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from hami.core import gctune, klog, tracing
from hami.core.kube.client import new_api_client
from hami.core.kube.events import EventRecorder
from hami.core.kube.options import KubeOptions
from hami.core.profiling import mount_pprof
from hami.core.serve import Server, TLSConfig, WebConfig, build_info, serve_metrics, serve_wsgi
from hami.core.serve.listener import DEFAULT_MAX_CONNECTIONS
from hami.scheduler.engine.admission import WebhookConfig
from hami.scheduler.engine.decision import FilterConfig
from hami.scheduler.extender.bind import Binder
from hami.scheduler.extender.collector import StateCollector
from hami.scheduler.extender.decisions import DEFAULT_CAPACITY, DecisionStore, Recorder
from hami.scheduler.extender.decisions import PREFIX as DECISIONS_PREFIX
from hami.scheduler.extender.decisions import make_app as decisions_app
from hami.scheduler.extender.events import PodEvents
from hami.scheduler.extender.filter_service import FilterService
from hami.scheduler.extender.leader import Leadership
from hami.scheduler.extender.metrics import SchedulerMetrics
from hami.scheduler.extender.nodelock import NodeLocker
from hami.scheduler.extender.register import TICK_SECONDS, Register
from hami.scheduler.extender.roles import RoleLabels
from hami.scheduler.extender.routes import hot_routes, make_app, make_webhook_app
from hami.scheduler.extender.state import ClusterState

log = klog.get_logger(__name__)


@dataclass
class Options:
    http_bind: str = "127.0.0.1:8080"
    cert_file: str = ""
    key_file: str = ""
    # Mutual TLS on http_bind: clients need a certificate from this CA (kube-scheduler's).
    client_ca_file: str = ""
    # /webhook on a listener of its own (TLS, no client certificates: the API server calls it).
    webhook_bind: str = ""
    web_config_file: str | None = None  # the metrics listener's, as every daemon's
    max_connections: int = DEFAULT_MAX_CONNECTIONS  # per listener
    scheduler_name: str = ""
    filter: FilterConfig = field(default_factory=FilterConfig)
    metrics_bind: str = ":9395"
    node_label_selector: str = ""
    kube: KubeOptions = field(default_factory=KubeOptions)
    profiling: bool = False
    node_lock_timeout: timedelta = timedelta(minutes=5)
    node_lock_retry_timeout: float = 28.0
    force_overwrite_default_scheduler: bool = True
    leader_elect: bool = False
    leader_elect_resource_name: str = ""
    leader_elect_resource_namespace: str = ""
    leader_identity: str = ""
    legacy_metrics: bool = False
    # Label each bound pod hami.io/vgpu-node (one pod patch a bind): for HAMi's device plugin and
    # vGPU monitor, which list pods by that label. Ours sets it on its Allocate patch.
    vgpu_node_label: bool = False
    pod_name: str = ""  # $POD_NAME / $POD_NAMESPACE: this replica, for the role labels
    pod_namespace: str = ""
    register_tick: float = TICK_SECONDS
    http_threads: int = 16
    decision_records: int = DEFAULT_CAPACITY  # --decision-records: pods whose latest verdict is kept
    enable_tracing: bool = False  # --enable-tracing (hami.core.tracing)
    gc_freeze: bool = True  # see hami.core.gctune; off where many daemons share one process (tests)


class Extender:
    """The running daemon; ``start()`` returns once every listener listens."""

    def __init__(self, opts: Options, configuration: Any = None) -> None:
        self.opts = opts
        self.registry = CollectorRegistry()
        build_info("scheduler", self.registry)
        self.metrics = SchedulerMetrics(self.registry)
        tracing.start("hami-scheduler", self.registry, opts.enable_tracing)
        self.api = new_api_client(opts.kube, self.registry, configuration=configuration)
        self.state = ClusterState(
            self.api, opts.filter.nvidia, self.metrics, node_label_selector=opts.node_label_selector or None
        )
        self.leader = Leadership(
            self.api,
            enabled=opts.leader_elect,
            name=opts.leader_elect_resource_name,
            namespace=opts.leader_elect_resource_namespace,
            identity=opts.leader_identity or None,
            on_elected=self.state.request_full_pass,
        )
        self.locker = NodeLocker(self.api, self.metrics, opts.node_lock_timeout)
        roles = (
            RoleLabels(self.state, self.api, opts.pod_namespace, opts.pod_name)
            if opts.pod_namespace
            else None
        )
        self.register = Register(
            self.state,
            self.api,
            is_leader=self.leader.is_leader,
            on_node_gone=self.locker.forget,
            on_synced=self._synced,
            on_leader_pass=roles.reconcile if roles is not None else lambda: None,
        )
        self.recorder = EventRecorder(
            self.api, opts.scheduler_name or "hami-scheduler", registry=self.registry
        )
        self.events = PodEvents(self.recorder, self.metrics)
        self.decisions = DecisionStore(opts.decision_records, on_evict=self.metrics.decisions_evicted.inc)
        decided = Recorder(self.decisions, self.state, opts.node_lock_timeout)
        self.filters = FilterService(self.state, self.api, self.events, opts.filter, recorder=decided)
        self.binder = Binder(
            self.state,
            self.api,
            self.locker,
            self.events,
            is_leader=self.leader.is_leader,
            lock_retry_timeout=opts.node_lock_retry_timeout,
            recorder=decided,
            label_pods=opts.vgpu_node_label,
        )
        # not registered: /metrics renders it itself (serve's ``exposition``), beside the registry
        self.collector = StateCollector(
            self.state,
            self.leader.is_leader,
            opts.legacy_metrics,
            lock_timeout=opts.node_lock_timeout,
            decisions=self.decisions,
        )
        webhook = WebhookConfig(
            opts.scheduler_name, opts.force_overwrite_default_scheduler, opts.filter.nvidia
        )
        self.app = make_app(self.state, self.filters, self.binder, None if opts.webhook_bind else webhook)
        self.webhook_app = make_webhook_app(self.state, webhook) if opts.webhook_bind else None
        self.http: Server | None = None
        self.webhook_server: Server | None = None
        self.metrics_server: Server | None = None

    def _synced(self) -> None:
        # The caches are complete now and live as long as the daemon: out of the GC's sight.
        if self.opts.gc_freeze:
            gctune.settle("the first full register pass")

    def start(self) -> None:
        """Listen first (a taken port fails here, before anything else runs), then start the caches,
        leadership and the register loop; on any failure, stop what started and raise."""
        try:
            self._listen()
            self.state.start()
            self.leader.start()
            self.register.start(self.opts.register_tick)
        except BaseException:
            self.stop()
            raise

    def _tls(self, client_ca: str = "") -> WebConfig | None:
        if not (self.opts.cert_file and self.opts.key_file):
            return None
        return WebConfig(tls=TLSConfig(
            cert_file=self.opts.cert_file, key_file=self.opts.key_file,
            client_auth_type="RequireAndVerifyClientCert" if client_ca else "NoClientCert",
            client_ca_file=client_ca or None,
        ))

    def _listen(self) -> None:
        # pprof sits behind the listener's own authentication, where the profiling guide looks.
        app = mount_pprof(self.app) if self.opts.profiling else self.app
        self.http = serve_wsgi(
            self.opts.http_bind, app, web_config=self._tls(self.opts.client_ca_file),
            name="hami-scheduler", threads=self.opts.http_threads,
            max_connections=self.opts.max_connections, registry=self.registry,
            direct=hot_routes(self.filters, self.binder),
        )
        if self.webhook_app is not None:
            self.webhook_server = serve_wsgi(
                self.opts.webhook_bind, self.webhook_app, web_config=self._tls(),
                name="hami-scheduler-webhook", threads=self.opts.http_threads,
                max_connections=self.opts.max_connections, registry=self.registry,
            )
        elif self.opts.client_ca_file:
            log.warning(
                "/webhook is served on the mutual-TLS listener %s: the API server cannot call it "
                "without a client certificate from %s; serve it apart with --webhook-bind",
                self.opts.http_bind, self.opts.client_ca_file,
            )
        self.metrics_server = serve_metrics(
            self.opts.metrics_bind,
            self.registry,
            profiling=self.opts.profiling,
            ready=lambda: (self.state.synced.is_set(), "cache not synced"),
            web_config_file=self.opts.web_config_file,
            name="hami-scheduler-metrics",
            exposition=self.collector,
            max_connections=self.opts.max_connections,
            extra_app=decisions_app(self.decisions, self.opts.node_lock_timeout),
            extra_links=[(DECISIONS_PREFIX, "Scheduling decisions")],
        )

    def stop(self) -> None:
        for server in (self.http, self.webhook_server, self.metrics_server):
            if server is not None:
                server.stop()
        self.register.stop()
        self.leader.stop()
        self.state.stop()
        self.recorder.stop()
        self.api.close()
        if self.opts.enable_tracing:
            tracing.shutdown()
