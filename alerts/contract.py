"""The four default alerts HAMi's maintainers proposed as a contract for their chart (HAMi issues 2460
and 2639), under their names, so that users of HAMi's chart find the same names here.

Three say what one of ours already says; alerts/routing.py inhibits one of each pair, so one fault is
one notification. `HAMiSchedulerMetricsAbsent` is off by default in HAMi's proposal: it goes in a
group of its own (OPTIONAL_GROUP) in a file of its own, alerts/hami-rules-optional.yaml, loaded only
when asked (the chart's `prometheusRule.optionalAlerts`, the mixin's `_config.optionalAlerts`:
docs/runbooks/README.md).
"""

from __future__ import annotations

from typing import Any

from alerts.rulebase import RuleBase

OPTIONAL_GROUP = "hami-optional.alerts"


class ContractRules(RuleBase):
    def contract_alerts(self) -> list[dict[str, Any]]:
        t, sch = self.t, self.sch
        return [
            self.alert(
                "HAMiGPUMemoryNearlyExhausted",
                "100 * node:hami_gpu_memory_allocated_per_limit:ratio"
                f" > {t['gpu_memory_nearly_exhausted_percent']}",
                "gpu_memory_nearly_exhausted",
                "warning",
                summary="GPU memory on a node is nearly exhausted by allocations.",
                description="Node {{ $labels.node }} has {{ printf \"%.1f\" $value }}% of its schedulable "
                "GPU memory allocated: new GPU pods will be filtered with CardInsufficientMemory.",
            ),
            # Per card, in percent of that card's cores (deviceCoreScaling may make a card 200).
            self.alert(
                "HAMiGPUCoresNearlyExhausted",
                f"100 * max by (node, device_uuid) (hami_gpu_core_allocated_ratio{{{sch}}})\n"
                f"  / (max by (node, device_uuid) (hami_gpu_core_limit_ratio{{{sch}}}) > 0)\n"
                f"> {t['gpu_cores_nearly_exhausted_percent']}",
                "gpu_cores_nearly_exhausted",
                "warning",
                summary="GPU cores of a card are nearly exhausted by allocations.",
                description="Device {{ $labels.device_uuid }} on node {{ $labels.node }} has "
                "{{ printf \"%.1f\" $value }}% of its cores allocated: new GPU pods that ask for cores "
                "will be filtered with CardInsufficientCore.",
            ),
            self.alert(
                "HAMivGPUMemoryNearLimit",
                "100 * namespace_pod_container:hami_vgpu_memory_used_per_limit:ratio"
                f" > {t['vgpu_memory_near_limit_percent']}",
                "vgpu_memory_near_limit",
                "warning",
                summary="A container is about to reach its vGPU memory limit.",
                description="{{ $labels.namespace }}/{{ $labels.pod }} container {{ $labels.container }} "
                "uses {{ printf \"%.1f\" $value }}% of its vGPU memory limit on device "
                "{{ $labels.device_uuid }} (node {{ $labels.node }}): its next allocations will fail.",
            ),
        ]

    def optional_alerts(self) -> list[dict[str, Any]]:
        job = self.cfg["jobs"]["scheduler"]
        return [
            self.alert(
                "HAMiSchedulerMetricsAbsent",
                # absent() of a comparison has no labels; the job label lets HAMiSchedulerDown inhibit it.
                f'label_replace(absent(up{{job="{job}"}} == 1), "job", "{job}", "", "")',
                "scheduler_metrics_absent",
                "critical",
                summary="Prometheus scrapes no metrics from the HAMi scheduler.",
                description='No target of job "{{ $labels.job }}" has answered a scrape for '
                f"{self.f['scheduler_metrics_absent']}: scheduling metrics, and the alerts built on them, "
                "are blind.",
            ),
        ]
