"""Cluster-facing dashboards: overview, node and device, container workloads."""

from __future__ import annotations

from dashboards.panels import FIRING, NAMESPACE, NODE, RI, Board, Line, Q, alert_thresholds

CTR = "{{namespace}}/{{pod}}/{{container}} v{{vdevice_index}}"
DEV = "{{node}} {{device_uuid}}"


def cluster_overview() -> Board:
    b = Board(
        "hami-cluster-overview",
        "HAMi / Cluster overview",
        "GPU capacity, allocation and health.",
        ["node", "namespace"],
    )
    b.row("Alerts")
    b.table(
        "Firing HAMi alerts",
        "none",
        Q(f"sum by (alertname, severity, node, namespace, pod) ({FIRING})", instant=True),
        "HAMi's alerts firing now (Prometheus ALERTS); each has a runbook in docs/runbooks/. "
        "Alertmanager's inhibitions (alerts/alertmanager.yaml) still apply to what gets notified.",
    )
    b.row("Capacity")
    b.stat("Physical GPUs", "none", Q(f"count(hami_gpu_memory_limit_bytes{{{NODE}}})", instant=True))
    b.stat("Schedulable GPU memory", "bytes", Q(f"sum(hami_gpu_memory_limit_bytes{{{NODE}}})", instant=True))
    b.stat(
        "GPU memory allocated",
        "percentunit",
        Q(
            f"sum(hami_gpu_memory_allocated_bytes{{{NODE}}}) / sum(hami_gpu_memory_limit_bytes{{{NODE}}})",
            instant=True,
        ),
        lines=[Line(0.8, "orange"), Line(alert_thresholds()["allocation_ratio"], "red")],
    )
    b.stat("Shared containers", "none", Q(f"sum(hami_gpu_shared_count{{{NODE}}})", instant=True))
    b.stat(
        "GPU pods pending",
        "none",
        Q("cluster:hami_scheduler_pending_pods:sum", instant=True),
        lines=[Line(1, "red")],
    )
    b.stat(
        "Unhealthy GPUs",
        "none",
        Q(f"count(hami_device_health{{{NODE}}} == 0) or vector(0)", instant=True),
        lines=[Line(1, "red")],
    )
    b.row("Allocation")
    b.timeseries(
        "GPU memory allocated per node",
        "percentunit",
        [Q(f"node:hami_gpu_memory_allocated_per_limit:ratio{{{NODE}}}", "{{node}}")],
        lines=[Line(alert_thresholds()["allocation_ratio"], "red")],
        minimum=0,
    )
    b.timeseries(
        "GPU cores allocated per node",
        "percentunit",
        [Q(f"node:hami_gpu_core_allocated_per_limit:ratio{{{NODE}}}", "{{node}}")],
        lines=[Line(alert_thresholds()["allocation_ratio"], "red")],
        minimum=0,
    )
    b.timeseries(
        "Split utilisation per node",
        "percentunit",
        [Q(f"node:hami_gpu_shared_per_split:ratio{{{NODE}}}", "{{node}}")],
        "Containers sharing the node's GPUs / configured deviceSplitCount.",
        lines=[Line(1, "red")],
        minimum=0,
    )
    b.row("Namespaces")
    b.timeseries(
        "vGPU memory allocated by namespace",
        "bytes",
        [Q(f"sum by (namespace) (hami_vgpu_memory_limit_bytes{{{NODE}, {NAMESPACE}}})", "{{namespace}}")],
        "vGPU memory limits of the running containers, summed per namespace.",
        stack=True,
        minimum=0,
    )
    b.timeseries(
        "vGPU memory used by namespace",
        "bytes",
        [Q(f"sum by (namespace) (hami_vgpu_memory_used_bytes{{{NODE}, {NAMESPACE}}})", "{{namespace}}")],
        "Device memory the containers of each namespace use now (HAMi-core accounting).",
        stack=True,
        minimum=0,
    )
    b.timeseries(
        "Pending GPU pods by namespace and reason",
        "none",
        [Q(f"namespace_reason:hami_scheduler_pending_pods:sum{{{NAMESPACE}}}", "{{namespace}} {{reason}}")],
        "Pending GPU pods per namespace, by the scheduler's latest verdict on them.",
        minimum=0,
    )
    b.timeseries(
        "Components up",
        "none",
        [Q('sum by (job) (up{job=~"hami-.*"})', "{{job}}")],
        "Healthy scrape targets per hami job.",
        minimum=0,
    )
    return b


def node_and_device() -> Board:
    b = Board("hami-node-device", "HAMi / Node and device", "Physical GPUs and their allocation.", ["node"])
    b.row("Physical GPUs (vGPU monitor)")
    b.timeseries(
        "GPU memory used",
        "bytes",
        [
            Q(f"hami_host_gpu_memory_used_bytes{{{NODE}}}", f"used {DEV}"),
            Q(f"hami_host_gpu_memory_total_bytes{{{NODE}}}", f"total {DEV}"),
        ],
    )
    b.timeseries(
        "GPU utilisation", "percent", [Q(f"hami_host_gpu_utilization_ratio{{{NODE}}}", DEV)], minimum=0
    )
    b.timeseries(
        "Temperature vs slowdown threshold",
        "celsius",
        [
            Q(f"hami_host_gpu_temperature_celsius{{{NODE}}}", DEV),
            Q(f"hami_host_gpu_temperature_slowdown_threshold_celsius{{{NODE}}}", f"slowdown {DEV}"),
        ],
        f"HAMiGPUTemperatureHigh fires {alert_thresholds()['temperature_margin_celsius']} °C below the "
        "card's slowdown threshold.",
        width=8,
    )
    b.timeseries("Power", "watt", [Q(f"hami_host_gpu_power_watts{{{NODE}}}", DEV)], width=8)
    b.timeseries(
        "XID and ECC errors",
        "short",
        [
            Q(
                f"sum by (node, device_uuid) (increase(hami_host_gpu_xid_errors_total{{{NODE}}}[{RI}]))",
                f"XID {DEV}",
            ),
            Q(
                f"sum by (node, device_uuid, error_type) "
                f"(increase(hami_host_gpu_ecc_errors_total{{{NODE}}}[{RI}]))",
                f"ECC {{{{error_type}}}} {DEV}",
            ),
        ],
        width=8,
    )
    b.timeseries(
        "Retired pages and remapped rows",
        "short",
        [
            Q(f"hami_host_gpu_retired_pages{{{NODE}}}", f"retired {{{{cause}}}} {DEV}"),
            Q(f"hami_host_gpu_remapped_rows{{{NODE}}}", f"remapped {{{{type}}}} {DEV}"),
            Q(
                f"hami_host_gpu_retired_pages_pending{{{NODE}}} == 1"
                f" or hami_host_gpu_row_remap_failure{{{NODE}}} == 1",
                f"needs reset {DEV}",
            ),
        ],
        "Pages retired (before Ampere) or rows remapped (Ampere+) for ECC errors; 'needs reset' marks a "
        "pending retirement or a failed remap (HAMiGPUEccErrors).",
        width=12,
    )
    b.timeseries(
        "Clock throttle reasons",
        "none",
        [
            Q(
                f"hami_host_gpu_clock_throttle_active"
                f'{{{NODE}, reason!~"gpu_idle|applications_clocks_setting"}} == 1',
                f"{{{{reason}}}} {DEV}",
            )
        ],
        "Active reasons other than idle and application clocks: power cap, thermal and hardware slowdowns.",
        width=12,
        minimum=0,
    )
    b.row("Health")
    b.timeseries(
        "Device health (device plugin / monitor)",
        "none",
        [
            Q(f"hami_device_health{{{NODE}}}", f"plugin {DEV}"),
            Q(f"hami_host_gpu_health{{{NODE}}}", f"monitor {DEV}"),
        ],
        "1 healthy, 0 unhealthy.",
    )
    b.timeseries(
        "Health events",
        "short",
        [
            Q(
                f"sum by (device_uuid, event) "
                f"(increase(hami_deviceplugin_health_events_total{{{NODE}}}[{RI}]))",
                "{{device_uuid}} {{event}}",
            )
        ],
    )
    b.row("Allocation (scheduler)")
    b.timeseries(
        "GPU memory allocated vs limit",
        "bytes",
        [
            Q(f"max by (node, device_uuid) (hami_gpu_memory_allocated_bytes{{{NODE}}})", f"allocated {DEV}"),
            Q(f"max by (node, device_uuid) (hami_gpu_memory_limit_bytes{{{NODE}}})", f"limit {DEV}"),
        ],
    )
    b.timeseries(
        "GPU cores allocated",
        "percent",
        [Q(f"max by (node, device_uuid) (hami_gpu_core_allocated_ratio{{{NODE}}})", DEV)],
        minimum=0,
    )
    b.timeseries(
        "Shared containers vs split count",
        "none",
        [
            Q(f"max by (node, device_uuid) (hami_gpu_shared_count{{{NODE}}})", f"shared {DEV}"),
            Q(f"max by (node, device_uuid) (hami_gpu_split_limit{{{NODE}}})", f"split {DEV}"),
        ],
    )
    b.timeseries(
        "Physical memory used / total",
        "percentunit",
        [Q(f"node_device:hami_host_gpu_memory_used_per_total:ratio{{{NODE}}}", DEV)],
        lines=[Line(alert_thresholds()["physical_memory_used_ratio"], "red")],
        minimum=0,
    )
    return b


def container_workloads() -> Board:
    b = Board(
        "hami-container-workloads",
        "HAMi / Container workloads",
        "vGPU memory and SM use of containers against their limits.",
        ["node", "namespace"],
    )
    sel = f"{NODE}, {NAMESPACE}"
    b.row("Memory")
    b.timeseries(
        "vGPU memory used vs limit",
        "bytes",
        [
            Q(f"hami_vgpu_memory_used_bytes{{{sel}}}", f"used {CTR}"),
            Q(f"hami_vgpu_memory_limit_bytes{{{sel}}}", f"limit {CTR}"),
        ],
    )
    b.timeseries(
        "vGPU memory used / limit",
        "percentunit",
        [Q(f"namespace_pod_container:hami_vgpu_memory_used_per_limit:ratio{{{sel}}}", CTR)],
        lines=[Line(alert_thresholds()["vgpu_memory_used_ratio"], "red")],
        minimum=0,
    )
    b.timeseries(
        "7-day peak memory / limit",
        "percentunit",
        [Q(f"namespace_pod_container:hami_vgpu_memory_used_per_limit:max_over_time7d{{{sel}}}", CTR)],
        "Over-commit candidates sit well below 50% (docs/guides/tuning.md §5.2).",
        lines=[Line(0.5, "orange"), Line(alert_thresholds()["vgpu_memory_used_ratio"], "red")],
        minimum=0,
    )
    b.timeseries(
        "Memory by kind",
        "bytes",
        [
            Q(
                f"sum by (namespace, pod) (hami_vgpu_memory_context_bytes{{{sel}}})",
                "context {{namespace}}/{{pod}}",
            ),
            Q(
                f"sum by (namespace, pod) (hami_vgpu_memory_module_bytes{{{sel}}})",
                "module {{namespace}}/{{pod}}",
            ),
            Q(
                f"sum by (namespace, pod) (hami_vgpu_memory_buffer_bytes{{{sel}}})",
                "buffer {{namespace}}/{{pod}}",
            ),
        ],
        stack=True,
    )
    b.timeseries(
        "Memory by accounting source",
        "bytes",
        [
            Q(
                f"max by (namespace, pod, container, source) (hami_vgpu_source_memory_used_bytes{{{sel}}})",
                "used {{source}} {{namespace}}/{{pod}}/{{container}}",
            ),
            Q(
                "max by (namespace, pod, container, source) "
                f'(hami_vgpu_source_memory_limit_bytes{{{sel}, limit="hard"}} > 0)',
                "limit {{source}} {{namespace}}/{{pod}}/{{container}}",
            ),
        ],
        "Each container's device memory as HAMi-core reports it and as the driver accounts it (nvml, "
        "dmem), whoever limits it; a container both account shows both.",
    )
    b.timeseries(
        "Driver minus HAMi-core memory",
        "bytes",
        [
            Q(
                f"max by (namespace, pod, container) (hami_vgpu_memory_accounting_gap_bytes{{{sel}}})",
                "{{namespace}}/{{pod}}/{{container}}",
            )
        ],
        "What the driver accounts to a HAMi-core container beyond what its shim reports; above the line "
        "for long, HAMiVGPUShimUnderReports fires.",
        lines=[Line(alert_thresholds()["shim_underreport_bytes"], "red")],
    )
    b.row("Compute")
    b.timeseries(
        "SM used vs limit",
        "percent",
        [
            Q(f"hami_vgpu_core_used_percent{{{sel}}}", f"used {CTR}"),
            Q(f"hami_vgpu_core_limit_percent{{{sel}}}", f"limit {CTR}"),
        ],
        minimum=0,
    )
    b.timeseries(
        "Seconds since last kernel",
        "s",
        [Q(f"hami_container_last_kernel_elapsed_seconds{{{sel}}}", CTR)],
        "Idle vGPUs are those past the line (no kernel for an hour).",
        lines=[Line(alert_thresholds()["idle_seconds"], "orange")],
    )
    b.timeseries("Processes per vGPU", "none", [Q(f"hami_vgpu_processes{{{sel}}}", CTR)], minimum=0)
    b.timeseries(
        "GPU processes not limited by HAMi-core",
        "none",
        [
            Q(
                f"sum by (namespace, pod, container, reason) (hami_vgpu_unlimited_processes{{{sel}}})",
                "{{namespace}}/{{pod}}/{{container}} {{reason}}",
            )
        ],
        "Processes of vGPU containers without a HAMi-core region: their limits are not enforced "
        "(HAMiVGPUNotLimited).",
        minimum=0,
    )
    b.timeseries(
        "Idle vGPUs per node", "none", [Q(f"node:hami_vgpu_idle:count{{{NODE}}}", "{{node}}")], minimum=0
    )
    b.table(
        "Top 10 containers by vGPU memory",
        "bytes",
        Q(f"topk(10, hami_vgpu_memory_used_bytes{{{sel}}})", instant=True),
    )
    return b
