"""Alerting rules, each with severity, static summary, templated description and runbook URL.

An alert whose condition is a quantity the recording rules already compute reads the record, not the raw
series again: the same value and labels, at most one evaluation interval older, and one raw read fewer per
evaluation (rule evaluation cost is mostly reading series).
"""

from __future__ import annotations

from typing import Any

from alerts.rulebase import CONTAINER_KEYS, RuleBase


class AlertingRules(RuleBase):
    def workload_alerts(self) -> list[dict[str, Any]]:
        t, mon, ksm = self.t, self.mon, self.ksm
        gpu = self.cfg["gpu_resource_regex"]
        who = "{{ $labels.namespace }}/{{ $labels.pod }} container {{ $labels.container }}"
        return [
            self.alert(
                "HAMiGPUMemoryHigh",
                "namespace_pod_container:hami_vgpu_memory_used_per_limit:ratio"
                f" > {t['vgpu_memory_used_ratio']}",
                "vgpu_memory_high",
                "warning",
                summary="A container is close to its vGPU memory limit.",
                description=f"{who} uses {{{{ $value | humanizePercentage }}}} of its vGPU memory limit "
                f"on device "
                "{{ $labels.device_uuid }} (node {{ $labels.node }}).",
            ),
            # HAMi's rule (docs/guides/tuning.md §5.4) joined on `pod` alone; pod names repeat across
            # namespaces.
            self.alert(
                "HAMiGPUPodPending",
                f'max by (namespace, pod) (kube_pod_status_phase{{{ksm}, phase="Pending"}}) == 1\n'
                f"and on (namespace, pod)\nmax by (namespace, pod) "
                f'(kube_pod_container_resource_requests{{{ksm}, resource=~"{gpu}"}}) > 0',
                "gpu_pod_pending",
                "warning",
                summary="A pod requesting GPUs has been Pending for a long time.",
                description="Pod {{ $labels.namespace }}/{{ $labels.pod }} requests HAMi GPU resources "
                "and has been "
                f"Pending for more than {self.f['gpu_pod_pending']}.",
            ),
            self.alert(
                "HAMiSchedulerPendingPods",
                f"sum by (reason) (max by (namespace, reason) (hami_scheduler_pending_pods{{{self.sch}}}))"
                f" > {t['scheduler_pending_pods']}",
                "scheduler_pending_pods",
                "warning",
                summary="The HAMi scheduler extender sees GPU pods stuck in Pending.",
                description='{{ printf "%.0f" $value }} pods requesting HAMi resources have been Pending '
                f"for more than {self.f['scheduler_pending_pods']}; the scheduler's latest verdict on them "
                "is {{ $labels.reason }} (hami-doctor pod NAMESPACE/NAME shows the numbers).",
            ),
            # The monitor exports usage above the limit as the limit (a skip with reason
            # usage_over_limit) and flags the container device in hami_vgpu_memory_over_limit.
            self.alert(
                "HAMiVGPUMemoryOverLimit",
                f"hami_vgpu_memory_limit_bytes{{{mon}}}\n  and on ({CONTAINER_KEYS}, device_uuid)\n"
                f"  hami_vgpu_memory_over_limit{{{mon}}} == 1",
                "vgpu_memory_over_limit",
                "warning",
                summary="A container uses more GPU memory than its vGPU limit.",
                description=f"{who} uses more GPU memory on device {{{{ $labels.device_uuid }}}} than "
                "its vGPU memory limit of {{ $value | humanize1024 }}B: "
                "HAMi-core is not enforcing the limit.",
            ),
            self.alert(
                "HAMiVGPUIdle",
                "namespace_pod_container:hami_vgpu_idle_seconds:last_kernel",
                "vgpu_idle",
                "info",
                summary="A container holds a vGPU but runs no kernel on it.",
                description=f"{who} holds vGPU memory on device {{{{ $labels.device_uuid }}}} (node "
                "{{ $labels.node }}) and ran no kernel for {{ $value | humanizeDuration }}: the "
                "slot and its memory are lost to other pods.",
            ),
            self.alert(
                "HAMiVGPUNotLimited",
                f"sum by (node, namespace, pod, container, reason) "
                f"(hami_vgpu_unlimited_processes{{{mon}}}) > 0",
                "vgpu_not_limited",
                "warning",
                summary="A container given vGPUs runs GPU processes that HAMi-core does not limit.",
                description=f"{who} (node {{{{ $labels.node }}}}) runs {{{{ $value }}}} GPU processes "
                "without HAMi-core ({{ $labels.reason }}): its vGPU memory and core limits are not "
                "enforced and it can take the whole GPU from the pods sharing it.",
            ),
            # The driver accounts every allocation of the container's cgroup, the shim only those it
            # intercepts: a lasting gap is memory its limit does not see (hami.exporter.driver).
            self.alert(
                "HAMiVGPUShimUnderReports",
                f"max by (node, namespace, pod, container, vdevice_index, device_uuid) "
                f"(hami_vgpu_memory_accounting_gap_bytes{{{mon}}}) > {t['shim_underreport_bytes']}",
                "shim_underreport",
                "warning",
                summary="HAMi-core reports less GPU memory for a container than the driver accounts to it.",
                description=f"The driver accounts {{{{ $value | humanize1024 }}}}B more on device "
                f"{{{{ $labels.device_uuid }}}} to {who} (node {{{{ $labels.node }}}}) than HAMi-core "
                "reports: allocations that bypass the shim are outside its vGPU memory limit.",
            ),
            self.alert(
                "HAMiVGPUCoreOverLimit",
                f"hami_vgpu_core_used_percent{{{mon}}}\n  > on ({CONTAINER_KEYS}, device_uuid) "
                f"group_left ()\n  (hami_vgpu_core_limit_percent{{{mon}}} < 100) + "
                f"{t['vgpu_core_over_limit_points']}",
                "vgpu_core_over_limit",
                "info",
                summary="A container keeps using more SM than its core limit.",
                description=f"{who} uses {{{{ $value }}}}% SM on device {{{{ $labels.device_uuid }}}}, "
                f"more than "
                f"{t['vgpu_core_over_limit_points']} points above its gpucores limit.",
            ),
        ]

    def device_alerts(self) -> list[dict[str, Any]]:
        t, sch, mon, dp = self.t, self.sch, self.mon, self.dp
        return [
            self.alert(
                "HAMiGPUMemoryAllocationHigh",
                f"node:hami_gpu_memory_allocated_per_limit:ratio > {t['allocation_ratio']}",
                "allocation_high",
                "warning",
                summary="GPU memory on a node is nearly all allocated.",
                description="Node {{ $labels.node }} has {{ $value | humanizePercentage }} of its "
                "schedulable GPU memory "
                "allocated; new GPU pods will fail with CardInsufficientMemory.",
            ),
            self.alert(
                "HAMiGPUCoreAllocationHigh",
                f"node:hami_gpu_core_allocated_per_limit:ratio > {t['allocation_ratio']}",
                "allocation_high",
                "warning",
                summary="GPU cores on a node are nearly all allocated.",
                description="Node {{ $labels.node }} has {{ $value | humanizePercentage }} of its GPU "
                "cores allocated; "
                "new GPU pods will fail with CardInsufficientCore.",
            ),
            self.alert(
                "HAMiGPUPhysicalMemoryNearFull",
                "node_device:hami_host_gpu_memory_used_per_total:ratio"
                f" > {t['physical_memory_used_ratio']}\n"
                f"and on (node, device_uuid)\n(\n"
                f"  max by (node, device_uuid) (hami_gpu_memory_allocated_bytes{{{sch}}})\n"
                f"  > on (node, device_uuid)\n"
                f"  max by (node, device_uuid) (hami_host_gpu_memory_total_bytes{{{mon}}})\n)",
                "physical_memory_near_full",
                "critical",
                summary="Physical memory is nearly full on an over-committed GPU.",
                description="Device {{ $labels.device_uuid }} on node {{ $labels.node }} has "
                "{{ $value | humanizePercentage }} of its physical memory in use while more memory is "
                "allocated on it than it has: containers on it will hit out-of-memory errors.",
            ),
            self.alert(
                "HAMiGPUDeviceUnhealthy",
                f"min by (node, device_uuid) (hami_device_health{{{dp}}} or hami_host_gpu_health{{{mon}}})"
                f" == 0",
                "device_unhealthy",
                "critical",
                summary="A GPU is unhealthy.",
                description="Device {{ $labels.device_uuid }} on node {{ $labels.node }} is reported "
                "unhealthy; kubelet "
                "no longer allocates it and its workloads may be failing.",
            ),
            self.alert(
                "HAMiGPUXidErrors",
                f"sum by (node, device_uuid) (increase(hami_host_gpu_xid_errors_total{{{mon}}}"
                f"[{self.w['errors']}])) > 0",
                "xid",
                "warning",
                summary="A GPU reported XID errors.",
                description="Device {{ $labels.device_uuid }} on node {{ $labels.node }} reported "
                f'{{{{ printf "%.0f" $value }}}} XID errors in the last {self.w["errors"]}.',
            ),
            # One series per problem, so the description names it; all three need the GPU drained.
            self.alert(
                "HAMiGPUEccErrors",
                f"label_replace(sum by (node, device_uuid) (increase(hami_host_gpu_ecc_errors_total{{{mon}, "
                f'error_type="uncorrected"}}[{self.w["errors"]}])) > 0,'
                ' "problem", "uncorrected ECC errors", "", "")\n'
                f"or label_replace(max by (node, device_uuid) (hami_host_gpu_retired_pages_pending{{{mon}}})"
                ' == 1, "problem", "retired pages waiting for a reset", "", "")\n'
                f"or label_replace(max by (node, device_uuid) (hami_host_gpu_row_remap_failure{{{mon}}})"
                ' == 1, "problem", "a failed row remap", "", "")',
                "ecc_errors",
                "critical",
                summary="A GPU has uncorrectable memory errors.",
                description="Device {{ $labels.device_uuid }} on node {{ $labels.node }} reports "
                f"{{{{ $labels.problem }}}} (uncorrected ECC errors in the last {self.w['errors']}, or "
                "NVML's retired-page / row-remap state): drain it and reset it.",
            ),
            self.alert(
                "HAMiGPUTemperatureHigh",
                f"max by (node, device_uuid) (hami_host_gpu_temperature_celsius{{{mon}}})\n"
                f"  >= on (node, device_uuid)\n"
                f"max by (node, device_uuid) (hami_host_gpu_temperature_slowdown_threshold_celsius{{{mon}}})"
                f" - {t['temperature_margin_celsius']}",
                "temperature_high",
                "warning",
                summary="A GPU runs close to its slowdown temperature.",
                description="Device {{ $labels.device_uuid }} on node {{ $labels.node }} is at "
                f"{{{{ $value }}}} °C, within {t['temperature_margin_celsius']} °C of the temperature at "
                "which it slows its clocks down: its workloads are or will soon be throttled.",
            ),
            self.alert(
                "HAMiDevicePluginAllocateErrors",
                f"sum by (instance, reason) (increase(hami_deviceplugin_allocate_errors_total{{{dp}}}"
                f"[{self.w['errors']}])) > 0",
                "allocate_errors",
                "warning",
                summary="The device plugin is failing Allocate calls.",
                description=f"The device plugin on {{{{ $labels.instance }}}} failed "
                f'{{{{ printf "%.0f" $value }}}} Allocate calls with reason {{{{ $labels.reason }}}} in '
                f"the last {self.w['errors']}; "
                "the affected containers cannot start.",
            ),
            # The gauge, not the counter: a region that stays broken is counted once, but stays a problem.
            self.alert(
                "HAMiMonitorRegionSkips",
                f"sum by (node, reason) (hami_monitor_regions_skipped{{{mon}}}) > 0",
                "region_skips",
                "warning",
                summary="The vGPU monitor keeps skipping shared regions.",
                description='{{ printf "%.0f" $value }} shared regions on node {{ $labels.node }} are '
                "skipped or clamped with reason {{ $labels.reason }}; the containers behind a skipped "
                "region are invisible to metrics and to the feedback loop.",
            ),
        ]

    def scheduler_alerts(self) -> list[dict[str, Any]]:
        t, sch, rate = self.t, self.sch, self.w["rate"]
        return [
            # Both node alerts follow the scheduler's own verdict (hami_scheduler_node_schedulable): a node
            # it places pods on never raises them, whatever the age of its annotations.
            self.alert(
                "HAMiNodeHandshakeExpired",
                f"max by (node) (hami_node_handshake_age_seconds{{{sch}}})\nand on (node)\n"
                f'max by (node) (hami_scheduler_node_schedulable{{{sch}, reason="handshake_expired"}} == 0)',
                "node_unschedulable",
                "warning",
                summary="The scheduler dropped a GPU node: its handshake expired.",
                description="The scheduler asked node {{ $labels.node }} for a handshake "
                "{{ $value | humanizeDuration }} ago, no device plugin answered and kubelet reports no "
                "allocatable GPU: it places no GPU pods there.",
            ),
            self.alert(
                "HAMiNodeLockHeldTooLong",
                f'max by (node) (hami_scheduler_node_schedulable{{{sch}, reason="node_lock"}} == 0)',
                "node_lock_held",
                "warning",
                summary="A node lock keeps GPU pods from binding to a node.",
                description="The hami.io/mutex.lock annotation on node {{ $labels.node }} has held the node "
                f"for more than {self.f['node_lock_held']}: binds of other pods fail until its owner "
                "releases it or it outlives the scheduler's --node-lock-timeout.",
            ),
            self.alert(
                "HAMiNodeLockExpired",
                f"increase(hami_scheduler_node_lock_expired_total{{{sch}}}[{self.w['errors']}]) > 0",
                "node_lock_expired",
                "info",
                summary="The scheduler broke an expired node lock.",
                description='{{ printf "%.0f" $value }} node locks expired in the last '
                f"{self.w['errors']} "
                "({{ $labels.instance }}): a bind crashed or outlived nodeLockExpire.",
            ),
            self.alert(
                "HAMiSchedulerFilterFailuresHigh",
                f"sum by (reason) (rate(hami_scheduler_filter_failures_total{{{sch}}}[{rate}]))"
                f" > {t['filter_failures_per_second']}",
                "filter_failures",
                "warning",
                summary="Many nodes are rejected by the scheduler's filter for one reason.",
                description="The filter rejects {{ $value | humanize }} nodes/s with reason {{ "
                "$labels.reason }}.",
            ),
            self.alert(
                "HAMiKubeClientThrottled",
                f"sum by (job) (rate(rest_client_rate_limiter_duration_seconds_sum{{{sch}}}[{rate}]))\n"
                f"  / (sum by (job) (rate(rest_client_rate_limiter_duration_seconds_count{{{sch}}}[{rate}]))"
                f" > 0)\n  > {t['kube_client_rate_limiter_wait_seconds']}",
                "kube_client_throttled",
                "warning",
                summary="The scheduler's Kubernetes API client is throttled by its own rate limiter.",
                description="Requests of {{ $labels.job }} wait {{ $value | humanizeDuration }} on "
                "average in the "
                "client-side rate limiter: --kube-qps/--kube-burst are too low for the load.",
            ),
        ]

    def absent_alerts(self) -> list[dict[str, Any]]:
        jobs: dict[str, str] = self.cfg["jobs"]
        spec = [
            ("HAMiMonitorDown", "monitor", "warning", "the vGPU monitor", "container GPU metrics are gone"),
            ("HAMiSchedulerDown", "scheduler", "critical", "the scheduler extender", "GPU pods cannot bind"),
            (
                "HAMiDevicePluginDown",
                "deviceplugin",
                "critical",
                "the device plugin",
                "GPU pods cannot start",
            ),
        ]
        daemons = "|".join(jobs[key] for key in ("monitor", "scheduler", "deviceplugin"))
        return [
            *(
                self.alert(
                    name,
                    # No target at all, or every target down; both branches carry the job label.
                    f'absent(up{{job="{jobs[key]}"}}) or max by (job) (up{{job="{jobs[key]}"}}) == 0',
                    "absent",
                    severity,
                    summary=f"Prometheus has no healthy target of {what}.",
                    description='No target of job "{{ $labels.job }}" has been up for '
                    f"{self.f['absent']}: {impact}.",
                )
                for name, key, severity, what, impact in spec
            ),
            # A listener at --web.max-connections closes new connections unread: scrapes, probes
            # and kube-scheduler's calls among them.
            self.alert(
                "HAMiHTTPConnectionsRefused",
                f"sum by (job, instance, listener) (rate(hami_http_connections_refused_total"
                f'{{job=~"{daemons}"}}[{self.w["rate"]}])) > 0',
                "connections_refused",
                "warning",
                summary="A hami HTTP listener is refusing connections at its bound.",
                description="Listener {{ $labels.listener }} of {{ $labels.instance }} refuses "
                '{{ printf "%.2f" $value }} connections/s: it holds --web.max-connections open, and '
                "scrapes, probes or kube-scheduler calls may be among those refused.",
            ),
        ]
