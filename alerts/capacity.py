"""Capacity rules: chargeback of shared cards to tenants under two policies, over-commit headroom and
fragmentation.

Fragmentation. A card's free slice (schedulable memory and cores nobody reserved, and a free split slot)
is usable when it can host the median request of the last 24 hours; the ratio is the share of free
memory that is not usable: 0 = every free slice can take a typical request, 1 = none can.

Over-commit. With deviceMemoryScaling > 1 the vGPU limits on a card add up to more than the card. Per
card: the physical headroom (total - used), what its vGPUs may still claim (Σ limit - used), and the
time to physical exhaustion at the trend of the last hour (deriv, the slope predict_linear extrapolates).

Chargeback. Every card's capacity is split, at every evaluation, into what its tenants (pods) hold and
what nobody holds (idle), so Σ tenants + idle = capacity at each timestamp and therefore over any window
(sum_over_time is linear). Two policies:

* reserved: what the scheduler allocated (hami_vgpu_*_allocated_*), against the card's schedulable
  capacity as the scheduler registered it (hami_gpu_*_limit_*, which includes deviceMemoryScaling);
* used: what HAMi-core measured (hami_vgpu_*_used_*), against the physical card (NVML's total memory,
  100 % of the SMs). Under this policy idle also holds memory used by processes outside HAMi.

A tenant series on a card that reports no capacity is left out of both sides, so the identity holds
even while a scheduler or monitor target is missing.
"""

from __future__ import annotations

from typing import Any

from alerts.rulebase import RuleBase

# Identity of one card in both the scheduler's and the monitor's series.
CARD = "node, device_uuid"


class CapacityRules(RuleBase):
    def _split(
        self,
        resource: str,
        unit: str,
        policy: str,
        *,
        tenants: str,
        keys: str,
        capacity: str,
        cap: str,
        idle: str,
    ) -> list[dict[str, Any]]:
        """Capacity per card (``capacity`` is the whole expression, labelled by card and GPU model); the
        tenants per pod on each card, the one record that the pod, namespace and idle records read (the
        raw series are read and joined once); the idle remainder per card."""
        cap_rec = f"node_device:hami_gpu_{resource}_{cap}_{unit}:max"
        card = f"namespace_pod_node_device:hami_gpu_{resource}_{policy}_{unit}:sum"
        pod = f"namespace_pod:hami_gpu_{resource}_{policy}_{unit}:sum"
        return [
            self.record(cap_rec, capacity),
            # `max by (keys)` folds scheduler replicas; the join keeps only cards with a capacity and
            # carries the GPU model, which prices a card-hour.
            self.record(
                card,
                f"sum by (namespace, pod, {CARD}, device_type) (\n  max by ({keys}) ({tenants})\n"
                f"  * on ({CARD}) group_left (device_type) group by ({CARD}, device_type) ({cap_rec})\n)",
            ),
            self.record(pod, f"sum by (namespace, pod, device_type) ({card})"),
            self.record(f"namespace:hami_gpu_{resource}_{policy}_{unit}:sum", f"sum by (namespace) ({pod})"),
            # Capacity minus every tenant on the card (none: the capacity), reading each record once; the
            # tenant series carry the card's labels, so the sum folds them onto their card.
            self.record(
                f"node_device:hami_gpu_{resource}_{idle}_{unit}:sum",
                f"sum by ({CARD}, device_type) (\n  {cap_rec}\n  or\n  -{card}\n)",
            ),
        ]

    def chargeback_rules(self) -> list[dict[str, Any]]:
        sch, mon = self.sch, self.mon
        alloc = f"namespace, pod, container_index, {CARD}"
        used = f"namespace, pod, container, vdevice_index, {CARD}"
        physical = f"hami_host_gpu_memory_total_bytes{{{mon}}}"
        return [
            *self._split(
                "memory",
                "bytes",
                "reserved",
                tenants=f"hami_vgpu_memory_allocated_bytes{{{sch}}}",
                keys=alloc,
                capacity=f"max by ({CARD}, device_type) (hami_gpu_memory_limit_bytes{{{sch}}})",
                cap="schedulable",
                idle="unreserved",
            ),
            *self._split(
                "core",
                "percent",
                "reserved",
                tenants=f"hami_vgpu_core_allocated_ratio{{{sch}}}",
                keys=alloc,
                capacity=f"max by ({CARD}, device_type) (hami_gpu_core_limit_ratio{{{sch}}})",
                cap="schedulable",
                idle="unreserved",
            ),
            *self._split(
                "memory",
                "bytes",
                "used",
                tenants=f"hami_vgpu_memory_used_bytes{{{mon}}}",
                keys=used,
                capacity=f"max by ({CARD}, device_type) ({physical})",
                cap="physical",
                idle="unused",
            ),
            # Every physical card has 100 % of its SMs; the physical memory record (earlier in the group,
            # so of this evaluation) says which cards exist.
            *self._split(
                "core",
                "percent",
                "used",
                tenants=f"hami_vgpu_core_used_percent{{{mon}}}",
                keys=used,
                capacity="0 * node_device:hami_gpu_memory_physical_bytes:max + 100",
                cap="physical",
                idle="unused",
            ),
        ]

    def overcommit_rules(self) -> list[dict[str, Any]]:
        mon, trend = self.mon, self.w["trend"]
        headroom = "node_device:hami_host_gpu_memory_headroom_bytes:total_minus_used"
        return [
            self.record(
                headroom,
                f"hami_host_gpu_memory_total_bytes{{{mon}}}\n  - on ({CARD}) group_left ()\n"
                f"  hami_host_gpu_memory_used_bytes{{{mon}}}",
            ),
            # Unlimited containers (limit 0) may claim the whole card; they are left out here and
            # counted by nothing, as HAMi-core does not cap them either.
            self.record(
                "node_device:hami_vgpu_memory_claimable_bytes:sum",
                f"sum by ({CARD}) (\n  clamp_min((hami_vgpu_memory_limit_bytes{{{mon}}} > 0)"
                f" - hami_vgpu_memory_used_bytes{{{mon}}}, 0)\n)",
            ),
            self.record(
                f"node_device:hami_host_gpu_memory_exhaustion_seconds:deriv{trend}",
                f"{headroom}\n  / on ({CARD}) group_left ()\n"
                f"  (deriv(hami_host_gpu_memory_used_bytes{{{mon}}}[{trend}]) > 0)",
            ),
        ]

    def overcommit_alerts(self) -> list[dict[str, Any]]:
        mon, trend = self.mon, self.w["trend"]
        horizon = self.t["overcommit_exhaustion_horizon_seconds"]
        card = "$labels.node $labels.device_uuid"
        pods = (
            f"{{{{ range $i, $s := printf `sum by (namespace, pod) (hami_vgpu_memory_limit_bytes{{{mon}, "
            f'node=%q, device_uuid=%q}})` {card} | query | sortByLabel "pod" }}}}'
            "{{ if $i }}, {{ end }}{{ $s.Labels.namespace }}/{{ $s.Labels.pod }}{{ end }}"
        )
        # The same quotient as the exhaustion record, from the raw series: a rule group never reads
        # another group's records of the same evaluation, so the text matches the alert's own moment.
        sel = f"{mon}, node=%q, device_uuid=%q"
        eta = (
            f"{{{{ with printf `(hami_host_gpu_memory_total_bytes{{{sel}}} - on (node, device_uuid) "
            f"hami_host_gpu_memory_used_bytes{{{sel}}}) / on (node, device_uuid) "
            f"deriv(hami_host_gpu_memory_used_bytes{{{sel}}}[{trend}])` {card} {card} {card} | query }}}}"
            "{{ . | first | value | humanizeDuration }}{{ end }}"
        )
        return [
            # Growth alone is normal (a job loading its model); it is a risk when the vGPUs on the card
            # may still claim more than is physically left, which only over-commit allows.
            self.alert(
                "HAMiGPUOvercommitExhaustionRisk",
                f"predict_linear(hami_host_gpu_memory_used_bytes{{{mon}}}[{trend}], {horizon})\n"
                f"  >= on ({CARD}) group_left () hami_host_gpu_memory_total_bytes{{{mon}}}\n"
                f"and on ({CARD})\n(\n  node_device:hami_vgpu_memory_claimable_bytes:sum\n"
                f"  > on ({CARD})\n  node_device:hami_host_gpu_memory_headroom_bytes:total_minus_used\n)",
                "overcommit_exhaustion",
                "warning",
                summary="An over-committed GPU is heading to physical memory exhaustion.",
                description="Device {{ $labels.device_uuid }} on node {{ $labels.node }} runs out of "
                f"physical memory in about {eta} at the last {trend}'s growth, and its vGPUs may still claim "
                "more than is left. Pods on it: " + pods + ".",
            ),
        ]

    def fragmentation_rules(self) -> list[dict[str, Any]]:
        sch, window = self.sch, self.w["requests"]
        mem_p50 = f"cluster:hami_vgpu_memory_request_bytes:p50_{window}"
        core_p50 = f"cluster:hami_vgpu_core_request_percent:p50_{window}"
        free = "node_device:hami_gpu_memory_unreserved_bytes:sum"
        usable = f"node_device:hami_gpu_memory_usable_bytes:p50_{window}"

        def ratio(by: str) -> str:
            return (
                f"1 - (\n  sum by ({by}) ({usable})\n  or sum by ({by}) ({free}) * 0\n)\n"
                f"/ (sum by ({by}) ({free}) > 0)\nand on () {mem_p50}"
            )

        return [
            # Each container allocated in the window counts once, at its largest allocation.
            self.record(
                mem_p50, f"quantile(0.5, max_over_time(hami_vgpu_memory_allocated_bytes{{{sch}}}[{window}]))"
            ),
            self.record(
                core_p50, f"quantile(0.5, max_over_time(hami_vgpu_core_allocated_ratio{{{sch}}}[{window}]))"
            ),
            # scalar(): each median is one series (NaN, so no card, without requests), compared without
            # a join.
            self.record(
                usable,
                f"{free} >= scalar({mem_p50})\n"
                f"and on ({CARD})\n"
                f"node_device:hami_gpu_core_unreserved_percent:sum >= scalar({core_p50})\n"
                f"and on ({CARD})\n"
                f"(\n  max by ({CARD}) (hami_gpu_split_limit{{{sch}}})\n"
                f"  - max by ({CARD}) (hami_gpu_shared_count{{{sch}}})\n) >= 1",
            ),
            self.record("gpu_model:hami_fragmentation_ratio", ratio("device_type")),
            self.record("node:hami_fragmentation_ratio", ratio("node")),
        ]

    def fragmentation_alerts(self) -> list[dict[str, Any]]:
        ksm = self.ksm
        # A container of a pod waiting for a node (Pending, not bound: a bound pod pulling its image is
        # not waiting for a card) asks for `nvidia.com/gpumem` MiB on each of its cards; the smallest
        # such request stands for them all (PromQL cannot pair every pod with every node).
        requests = (
            "max by (namespace, pod, container) (kube_pod_container_resource_requests"
            f'{{{ksm}, resource="nvidia_com_gpumem", node=""}}) * 1048576\n'
            "  and on (namespace, pod)\n"
            f'  (max by (namespace, pod) (kube_pod_status_phase{{{ksm}, phase="Pending"}}) == 1)'
        )
        smallest = f"min(\n  {requests}\n)"
        free = "node_device:hami_gpu_memory_unreserved_bytes:sum"
        card = "node_device:hami_gpu_memory_schedulable_bytes:max"
        one_line = " ".join(requests.split())
        pod = (
            f"{{{{ range printf `bottomk(1, {one_line})` | query }}}}"
            "{{ .Labels.namespace }}/{{ .Labels.pod }} asks for {{ .Value | humanize1024 }}B per card"
            "{{ end }}"
        )
        largest = (
            f"{{{{ with printf `max({free}{{node=%q}})` $labels.node | query }}}}"
            "{{ . | first | value | humanize1024 }}B{{ end }}"
        )
        ratio = (
            "{{ with printf `node:hami_fragmentation_ratio{node=%q}` $labels.node | query }}"
            "{{ . | first | value | humanizePercentage }}{{ else }}not known yet{{ end }}"
        )
        return [
            # Memory decides, as in `hami-tune defrag`: cores and split slots are not modelled here. A
            # request larger than the node's cards is not fragmentation, so the node's largest card must
            # be able to take it when empty.
            self.alert(
                "HAMiGPUFragmentationBlocksPods",
                f"sum by (node) ({free}) >= on () group_left () {smallest}\n"
                f"and on (node)\nmax by (node) ({free}) < on () group_left () {smallest}\n"
                f"and on (node)\nmax by (node) ({card}) >= on () group_left () {smallest}",
                "fragmentation_blocks_pods",
                "warning",
                summary="Pending GPU pods would fit a node's free GPU memory, but no single card of it.",
                description=f"Node {{{{ $labels.node }}}} has {{{{ $value | humanize1024 }}}}B of GPU memory "
                f"free, at most {largest} on one card, while {pod} and stays Pending. Its fragmentation "
                f"ratio (free memory that cannot take the median request) is {ratio}. `hami-tune defrag` "
                "says which nodes to drain, in which order, to free whole cards.",
            ),
        ]

    def reconciler_alerts(self) -> list[dict[str, Any]]:
        return [
            # A pod's first CUDA call creates its region, so a fresh allocation has none for a moment;
            # the `for` outlasts that.
            self.alert(
                "HAMiAllocationInconsistent",
                f"max by (node, kind) (hami_inconsistency{{{self.mon}}}) > 0",
                "allocation_inconsistent",
                "warning",
                summary="The scheduler's allocations, HAMi-core's regions and NVML disagree on a node.",
                description="Node {{ $labels.node }} has {{ $value }} finding(s) of kind {{ $labels.kind }}: "
                "what the scheduler allocated, what HAMi-core measures and what runs on the GPUs no longer "
                "match there. The runbook says what each kind means and how to fix it.",
            ),
        ]
