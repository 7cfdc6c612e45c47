"""Recording rules: the tuning quantities, in `level:metric:operations` names.

Section signs (§) refer to docs/guides/tuning.md.
"""

from __future__ import annotations

from typing import Any

from alerts.rulebase import TILE, RuleBase
from hami.tune.collect import core_quantile_expr
from hami.tune.tables import CORE_QUANTILE_NAME as SM_QUANTILE

MEMORY_USED_TILE = f"namespace_pod_container:hami_vgpu_memory_used_bytes:max_over_time{TILE}"


class RecordingRules(RuleBase):
    def vgpu_tiles(self) -> list[dict[str, Any]]:
        # The hourly tile of the 7-day peak (hami-tiles.rules). Staleness hides it from instant queries
        # 5 minutes after each evaluation: read it only with range functions (see tiled_max).
        return [
            self.record(MEMORY_USED_TILE, f"max_over_time(hami_vgpu_memory_used_bytes{{{self.mon}}}[{TILE}])")
        ]

    def vgpu_rules(self) -> list[dict[str, Any]]:
        mon, peak, sm = self.mon, self.w["peak"], self.w["sm_use"]
        factor = self.t["overcommit_safety_factor"]
        pool = self.cfg["pool_label"]
        return [
            self.record(
                "namespace_pod_container:hami_vgpu_memory_used_per_limit:ratio",
                f"hami_vgpu_memory_used_bytes{{{mon}}} / (hami_vgpu_memory_limit_bytes{{{mon}}} > 0)",
            ),
            self.record(
                f"namespace_pod_container:hami_vgpu_memory_used_bytes:max_over_time{peak}",
                self.tiled_max(f"hami_vgpu_memory_used_bytes{{{mon}}}", MEMORY_USED_TILE, peak),
            ),
            self.record(
                f"namespace_pod_container:hami_vgpu_memory_used_per_limit:max_over_time{peak}",
                f"namespace_pod_container:hami_vgpu_memory_used_bytes:max_over_time{peak}\n"
                f"  / (hami_vgpu_memory_limit_bytes{{{mon}}} > 0)",
            ),
            self.record(
                "namespace_pod_container:hami_vgpu_core_used_per_limit:ratio",
                f"hami_vgpu_core_used_percent{{{mon}}} / (hami_vgpu_core_limit_percent{{{mon}}} > 0)",
            ),
            # §5's SM-use distribution: a quantile over time of the gauge (histogram_quantile wants
            # buckets); the same expression hami-tune's gpuCorePolicy and gpucores rules evaluate.
            self.record(
                f"namespace_pod_container:hami_vgpu_core_used_percent:{SM_QUANTILE}_over_time{sm}",
                core_quantile_expr(mon, sm),
            ),
            self.record(
                f"namespace_pod_container:hami_vgpu_core_used_{SM_QUANTILE}_per_limit:ratio{sm}",
                f"namespace_pod_container:hami_vgpu_core_used_percent:{SM_QUANTILE}_over_time{sm}\n"
                f"  / (hami_vgpu_core_limit_percent{{{mon}}} > 0)",
            ),
            # Σ requested and Σ peak over the same population: containers running now.
            self.record(
                "node:hami_vgpu_memory_limit_bytes:sum",
                f"sum by (node) (hami_vgpu_memory_limit_bytes{{{mon}}})",
            ),
            self.record(
                f"node:hami_vgpu_memory_used_bytes:sum_max_over_time{peak}",
                f"sum by (node) (\n"
                f"  namespace_pod_container:hami_vgpu_memory_used_bytes:max_over_time{peak}\n"
                f"  and hami_vgpu_memory_limit_bytes{{{mon}}}\n)",
            ),
            self.record(
                "node:hami_vgpu_memory_overcommit_safe:ratio",
                f"node:hami_vgpu_memory_limit_bytes:sum\n"
                f"  / (node:hami_vgpu_memory_used_bytes:sum_max_over_time{peak} > 0) * {factor}",
            ),
            self.record(
                "cluster:hami_vgpu_memory_overcommit_safe:ratio",
                f"sum(node:hami_vgpu_memory_limit_bytes:sum)\n"
                f"  / (sum(node:hami_vgpu_memory_used_bytes:sum_max_over_time{peak}) > 0) * {factor}",
            ),
            self.record(
                "node:hami_node_pool:info",
                f'max by (node, pool) (\n  label_replace(kube_node_labels{{{self.ksm}, {pool}!=""}}, '
                f'"pool", "$1", "{pool}", "(.+)")\n)',
            ),
            self.record(
                "pool:hami_vgpu_memory_overcommit_safe:ratio",
                f"sum by (pool) (node:hami_vgpu_memory_limit_bytes:sum * on (node) group_left (pool)"
                f" node:hami_node_pool:info)\n"
                f"  / (sum by (pool) (node:hami_vgpu_memory_used_bytes:sum_max_over_time{peak}"
                f" * on (node) group_left (pool) node:hami_node_pool:info) > 0)\n  * {factor}",
            ),
            # Idle = the region's own last-kernel timestamp is an hour old. SM utilisation is a sampled
            # rate that reads 0 between short kernels, so it cannot tell "no kernel" (see the runbook).
            self.record(
                "namespace_pod_container:hami_vgpu_idle_seconds:last_kernel",
                f"hami_container_last_kernel_elapsed_seconds{{{mon}}} >= {self.t['idle_seconds']}",
            ),
            self.record(
                "node:hami_vgpu_idle:count",
                "count by (node) (namespace_pod_container:hami_vgpu_idle_seconds:last_kernel)",
            ),
        ]

    def device_rules(self) -> list[dict[str, Any]]:
        sch, mon, ksm = self.sch, self.mon, self.ksm
        gpu = self.cfg["gpu_resource_regex"]
        return [
            # Node GPU headroom twice: the kubelet's (allocatable minus the requests of pods that hold
            # a place, from kube-state-metrics) and HAMi's (split slots minus shared). They differ when
            # the two disagree on what runs there.
            self.record(
                "node:kube_gpu_allocatable_free:sum",
                f'sum by (node) (kube_node_status_allocatable{{{ksm}, resource=~"{gpu}"}})\n'
                f"  - (\n    sum by (node) (\n"
                f'      kube_pod_container_resource_requests{{{ksm}, resource=~"{gpu}"}}\n'
                "      * on (namespace, pod) group_left ()\n"
                "      (max by (namespace, pod) "
                f'(kube_pod_status_phase{{{ksm}, phase=~"Pending|Running"}}) == 1)\n'
                "    )\n"
                f'    or sum by (node) (kube_node_status_allocatable{{{ksm}, resource=~"{gpu}"}}) * 0\n  )',
            ),
            self.record(
                "node:hami_gpu_split_free:sum",
                f"sum by (node) (\n  max by (node, device_uuid) (hami_gpu_split_limit{{{sch}}})\n"
                f"  - max by (node, device_uuid) (hami_gpu_shared_count{{{sch}}})\n)",
            ),
            self.record(
                "node:hami_gpu_memory_allocated_per_limit:ratio",
                f"sum by (node) (max by (node, device_uuid) (hami_gpu_memory_allocated_bytes{{{sch}}}))\n"
                f"  / (sum by (node) (max by (node, device_uuid) (hami_gpu_memory_limit_bytes{{{sch}}}))"
                f" > 0)",
            ),
            self.record(
                "node:hami_gpu_core_allocated_per_limit:ratio",
                f"sum by (node) (max by (node, device_uuid) (hami_gpu_core_allocated_ratio{{{sch}}}))\n"
                f"  / (sum by (node) (max by (node, device_uuid) (hami_gpu_core_limit_ratio{{{sch}}})) > 0)",
            ),
            self.record(
                "node_device:hami_gpu_shared_per_split:ratio",
                f"max by (node, device_uuid) (hami_gpu_shared_count{{{sch}}})\n"
                f"  / (max by (node, device_uuid) (hami_gpu_split_limit{{{sch}}}) > 0)",
            ),
            self.record(
                "node:hami_gpu_shared_per_split:ratio",
                f"sum by (node) (max by (node, device_uuid) (hami_gpu_shared_count{{{sch}}}))\n"
                f"  / (sum by (node) (max by (node, device_uuid) (hami_gpu_split_limit{{{sch}}})) > 0)",
            ),
            self.record(
                "node_device:hami_host_gpu_memory_used_per_total:ratio",
                f"hami_host_gpu_memory_used_bytes{{{mon}}}\n  / on (node, device_uuid) group_left ()\n"
                f"  (hami_host_gpu_memory_total_bytes{{{mon}}} > 0)",
            ),
        ]

    def scheduler_rules(self) -> list[dict[str, Any]]:
        sch, rate, ksm = self.sch, self.w["rate"], self.ksm
        gpu = self.cfg["gpu_resource_regex"]
        return [
            # Replicas of one scheduler report the same pods: max over them, then sum.
            self.record(
                "namespace_reason:hami_scheduler_pending_pods:sum",
                f"max by (namespace, reason) (hami_scheduler_pending_pods{{{sch}}})",
            ),
            self.record(
                "cluster:hami_scheduler_pending_pods:sum",
                "sum(namespace_reason:hami_scheduler_pending_pods:sum)",
            ),
            self.record(
                "namespace:kube_pod_gpu_pending:count",
                f"count by (namespace) (\n"
                f'  max by (namespace, pod) (kube_pod_status_phase{{{ksm}, phase="Pending"}}) == 1\n'
                "  and on (namespace, pod)\n  max by (namespace, pod) "
                f'(kube_pod_container_resource_requests{{{ksm}, resource=~"{gpu}"}}) > 0\n)',
            ),
            self.record(
                f"reason:hami_scheduler_filter_failures:rate{rate}",
                f"sum by (reason) (rate(hami_scheduler_filter_failures_total{{{sch}}}[{rate}]))",
            ),
            self.record(
                f"job:rest_client_requests:rate{rate}",
                f"sum by (job) (rate(rest_client_requests_total[{rate}]))",
            ),
            self.record(
                f"job:rest_client_requests_per_qps:ratio_rate{rate}",
                f"job:rest_client_requests:rate{rate} / (max by (job) (hami_kube_client_qps) > 0)",
            ),
            self.record(
                f"job:rest_client_rate_limiter_duration_seconds:mean_rate{rate}",
                f"sum by (job) (rate(rest_client_rate_limiter_duration_seconds_sum[{rate}]))\n"
                f"  / (sum by (job) (rate(rest_client_rate_limiter_duration_seconds_count[{rate}])) > 0)",
            ),
            self.record(
                f"job:hami_scheduler_bind_duration_seconds:p99_rate{rate}",
                f"histogram_quantile(0.99, sum by (job, le) "
                f"(rate(hami_scheduler_bind_duration_seconds_bucket{{{sch}}}[{rate}])))",
            ),
            self.record(
                f"job:hami_scheduler_node_lock_wait_seconds:p99_rate{rate}",
                f"histogram_quantile(0.99, sum by (job, le) "
                f"(rate(hami_scheduler_node_lock_wait_seconds_bucket{{{sch}}}[{rate}])))",
            ),
        ]
