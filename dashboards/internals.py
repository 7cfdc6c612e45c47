"""Component dashboards: scheduler internals; device plugin and vGPU monitor internals."""

from __future__ import annotations

from dashboards.panels import JOB, NODE, RI, Board, Line, Q, alert_thresholds


def _quantiles(metric: str, by: str, sel: str = "", exemplar: bool = False) -> list[Q]:
    """p50 and p99 of a histogram; ``exemplar``: with the trace IDs its observations carry."""
    legend = " ".join(f"{{{{{label.strip()}}}}}" for label in by.split(",") if label.strip())
    return [
        Q(
            f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{{{sel}}}[{RI}])))",
            f"p{int(q * 100)} {legend}".strip(),
            exemplar=exemplar,
        )
        for q in (0.5, 0.99)
    ]


def scheduler() -> Board:
    b = Board(
        "hami-scheduler",
        "HAMi / Scheduler internals",
        "The scheduler extender: filter and bind latency, failures, node locks, handshakes, API client.",
        ["job", "node"],
    )
    t = alert_thresholds()
    b.row("State")
    b.stat("Leader", "none", Q(f"max(hami_scheduler_is_leader{{{JOB}}})", instant=True), width=6)
    b.stat(
        "Cache synced",
        "none",
        Q(f"min(hami_scheduler_cache_synced{{{JOB}}})", instant=True),
        lines=[Line(1, "green")],
        width=6,
    )
    pending = Q(f"sum(max by (namespace, reason) (hami_scheduler_pending_pods{{{JOB}}}))", instant=True)
    b.stat("Pending GPU pods", "none", pending, width=6)
    b.stat(
        "Nodes with expired handshake",
        "none",
        Q(f'max(hami_scheduler_nodes{{{JOB}, state="handshake_expired"}})', instant=True),
        lines=[Line(1, "red")],
        width=6,
    )
    b.timeseries(
        "Nodes by state", "none", [Q(f"max by (state) (hami_scheduler_nodes{{{JOB}}})", "{{state}}")]
    )
    b.timeseries(
        "Unschedulable nodes by reason",
        "none",
        [
            Q(
                f"count by (reason) (max by (node, reason) "
                f"(hami_scheduler_node_schedulable{{{JOB}, {NODE}}} == 0))",
                "{{reason}}",
            )
        ],
        "Nodes the scheduler places no GPU pod on, by its reason (hami_scheduler_node_schedulable); "
        "HAMiNodeHandshakeExpired and HAMiNodeLockHeldTooLong fire from the same series.",
        minimum=0,
    )
    b.timeseries(
        "Handshake age",
        "s",
        [Q(f"max by (node) (hami_node_handshake_age_seconds{{{JOB}, {NODE}}})", "{{node}}")],
        "Seconds since the scheduler's handshake request. v2.10 device plugins never answer it, so it "
        "grows on healthy nodes too; a node is dropped only when kubelet also reports no allocatable GPU.",
    )
    b.row("Filter and bind")
    b.timeseries(
        "Filter latency", "s", _quantiles("hami_scheduler_filter_duration_seconds", "result", JOB, True)
    )
    b.timeseries("Bind latency", "s", _quantiles("hami_scheduler_bind_duration_seconds", "result", JOB, True))
    b.timeseries(
        "Pod creation to bind",
        "s",
        [
            Q(
                f"histogram_quantile({q}, sum by (le) "
                f"(rate(hami_scheduler_pod_creation_to_bind_seconds_bucket{{{JOB}}}[{RI}])))",
                f"p{int(q * 100)}",
                exemplar=True,
            )
            for q in (0.5, 0.99)
        ],
    )
    b.timeseries(
        "Bind phases (p99)", "s", _quantiles("hami_scheduler_bind_phase_duration_seconds", "phase", JOB)[1:]
    )
    b.timeseries(
        "Filter failures by reason",
        "ops",
        [Q(f"sum by (reason) (rate(hami_scheduler_filter_failures_total{{{JOB}}}[{RI}]))", "{{reason}}")],
        "Counted per rejected node.",
        lines=[Line(t["filter_failures_per_second"], "red")],
    )
    b.timeseries(
        "Events by reason",
        "ops",
        [Q(f"sum by (reason) (rate(hami_scheduler_events_total{{{JOB}}}[{RI}]))", "{{reason}}")],
    )
    b.timeseries(
        "Unschedulable pods",
        "ops",
        [Q(f"sum(rate(hami_scheduler_pods_unschedulable_total{{{JOB}}}[{RI}]))", "pods/s")],
    )
    b.row("Node locks")
    b.timeseries(
        "Locks held",
        "none",
        [Q(f"max by (node) (hami_scheduler_node_lock_held{{{JOB}, {NODE}}})", "{{node}}")],
    )
    b.timeseries("Lock wait", "s", _quantiles("hami_scheduler_node_lock_wait_seconds", "job", JOB))
    b.timeseries(
        "Expired locks",
        "short",
        [Q(f"sum(increase(hami_scheduler_node_lock_expired_total{{{JOB}}}[{RI}]))", "expired")],
    )
    b.row("Kubernetes API client")
    b.timeseries(
        "Requests by code",
        "reqps",
        [Q(f"sum by (code) (rate(rest_client_requests_total{{{JOB}}}[{RI}]))", "{{code}}")],
    )
    b.timeseries("Request latency", "s", _quantiles("rest_client_request_duration_seconds", "verb", JOB))
    b.timeseries(
        "Rate-limiter wait (mean)",
        "s",
        [
            Q(
                f"sum(rate(rest_client_rate_limiter_duration_seconds_sum{{{JOB}}}[{RI}]))"
                f" / sum(rate(rest_client_rate_limiter_duration_seconds_count{{{JOB}}}[{RI}]))",
                "mean wait",
            )
        ],
        lines=[Line(t["kube_client_rate_limiter_wait_seconds"], "red")],
    )
    b.row("Process")
    b.timeseries(
        "CPU", "percentunit", [Q(f"rate(process_cpu_seconds_total{{{JOB}}}[{RI}])", "{{instance}}")], width=12
    )
    b.timeseries("Resident memory", "bytes", [Q(f"process_resident_memory_bytes{{{JOB}}}", "{{instance}}")])
    return b


def device_plugin() -> Board:
    b = Board(
        "hami-device-plugin",
        "HAMi / Device plugin and monitor internals",
        "Allocate, registration and health of the device plugin; collection of the vGPU monitor.",
        ["node"],
    )
    b.row("Device plugin")
    b.timeseries(
        "Allocate latency", "s",
        _quantiles("hami_deviceplugin_allocate_duration_seconds", "result", NODE, exemplar=True),
    )
    b.timeseries(
        "Allocate errors by reason",
        "short",
        [
            Q(
                f"sum by (reason) (increase(hami_deviceplugin_allocate_errors_total{{{NODE}}}[{RI}]))",
                "{{reason}}",
            )
        ],
    )
    b.timeseries(
        "Registrations by result",
        "ops",
        [Q(f"sum by (result) (rate(hami_deviceplugin_register_total{{{NODE}}}[{RI}]))", "{{result}}")],
    )
    b.timeseries(
        "Time since last successful registration",
        "s",
        [Q(f"time() - hami_deviceplugin_register_last_success_timestamp_seconds{{{NODE}}}", "{{node}}")],
    )
    b.timeseries(
        "Registered with kubelet", "none", [Q(f"hami_deviceplugin_kubelet_registered{{{NODE}}}", "{{node}}")]
    )
    b.timeseries(
        "gRPC server restarts",
        "short",
        [Q(f"sum by (node) (increase(hami_deviceplugin_grpc_restarts_total{{{NODE}}}[{RI}]))", "{{node}}")],
        "The kubelet-facing server found dead and served again; the seventh crash in a row within an "
        "hour of each other ends the plugin.",
    )
    b.timeseries(
        "Configured split, memory and core scaling",
        "none",
        [
            Q(f"max by (node) (hami_device_split_limit{{{NODE}}})", "split {{node}}"),
            Q(f"max by (node) (hami_device_memory_scaling{{{NODE}}})", "memory scaling {{node}}"),
            Q(f"max by (node) (hami_device_core_scaling{{{NODE}}})", "core scaling {{node}}"),
        ],
    )
    b.timeseries(
        "Memory enforcement",
        "none",
        [
            Q(
                f"max by (node, enforcement) (hami_device_memory_enforcement{{{NODE}}}) == 1",
                "{{node}} {{enforcement}}",
            )
        ],
        "Who enforces vGPU memory limits on each node's cards: hami-core (HAMi's shim) or driver (the "
        "driver's per-cgroup limits, --memory-enforcement=driver).",
    )
    b.row("vGPU monitor")
    b.timeseries("Collection latency", "s", _quantiles("hami_monitor_collect_duration_seconds", "node", NODE))
    b.timeseries(
        "Shared regions by state",
        "none",
        [Q(f"sum by (node, state) (hami_monitor_regions{{{NODE}}})", "{{node}} {{state}}")],
        stack=True,
    )
    b.timeseries(
        "Region skips by reason",
        "ops",
        [Q(f"sum by (reason) (rate(hami_monitor_region_skips_total{{{NODE}}}[{RI}]))", "{{reason}}")],
    )
    b.timeseries(
        "NVML errors by call",
        "ops",
        [Q(f"sum by (call) (rate(hami_monitor_nvml_errors_total{{{NODE}}}[{RI}]))", "{{call}}")],
    )
    b.timeseries(
        "Driver accounting sources",
        "none",
        [
            Q(
                f"max by (node, source, reason) (hami_monitor_driver_source_available{{{NODE}}})",
                "{{node}} {{source}} {{reason}}",
            )
        ],
        "1 where the monitor reads the driver's per-container memory accounting through the source, 0 "
        "with the reason it is absent (an older driver or kernel, no cgroup v2 root).",
    )
    return b
