"""What each panel shows and how to read it, for panels whose builder call gives no description.

Grafana shows these in the panel's (i) tooltip; the generator refuses a panel without one.
"""

from __future__ import annotations

DESCRIPTIONS: dict[str, str] = {
    # overview
    "Physical GPUs": "GPUs registered by the device plugins (hami_gpu_memory_limit_bytes, one per card).",
    "Schedulable GPU memory": (
        "Device memory the scheduler may hand out: registered memory × deviceMemoryScaling."
    ),
    "GPU memory allocated": (
        "Allocated / schedulable GPU memory; new pods fail with CardInsufficientMemory near 100%."
    ),
    "Shared containers": "Containers holding a vGPU, summed over every card (hami_gpu_shared_count).",
    "GPU pods pending": (
        "GPU pods Pending, counted once across scheduler replicas; hami-doctor pod NS/NAME says why."
    ),
    "Unhealthy GPUs": "GPUs the device plugin reports unhealthy (kubelet no longer allocates them).",
    "GPU memory allocated per node": (
        "Allocated / schedulable GPU memory per node; the line is the alert threshold."
    ),
    "GPU cores allocated per node": "Allocated / total GPU cores per node; the line is the alert threshold.",
    # container workloads
    "vGPU memory used vs limit": (
        "HAMi-core's accounting of each container's device memory against its vGPU limit."
    ),
    "vGPU memory used / limit": (
        "Per-container memory use over its limit; the line is HAMiGPUMemoryHigh's threshold."
    ),
    "Memory by kind": "Context, module and buffer memory per pod, as HAMi-core accounts it.",
    "SM used vs limit": "Container SM use (0-100, clamped) against its gpucores limit.",
    "Processes per vGPU": "Live processes in each container's shared region (dead slots excluded).",
    "Idle vGPUs per node": "Containers that ran no kernel for an hour (HAMiVGPUIdle fires for each).",
    "Top 10 containers by vGPU memory": "The ten containers using the most vGPU memory now.",
    # device plugin and monitor
    "Allocate latency": (
        "kubelet's Allocate calls to the device plugin, p50 and p99 by result; with tracing on, the "
        "exemplars (dots) lead to the pod's trace."
    ),
    "Allocate errors by reason": "Failed Allocate calls by reason; the affected containers cannot start.",
    "Registrations by result": "Node annotation writes of the register loop (every 30 s), by result.",
    "Time since last successful registration": (
        "Seconds since the plugin last wrote hami.io/node-nvidia-register."
    ),
    "Registered with kubelet": "1 while the plugin is registered with kubelet on the node.",
    "Configured split, memory and core scaling": (
        "The device config per node: deviceSplitCount and the scalings."
    ),
    "Collection latency": "Time the monitor takes to read every region, join pods and read NVML per scrape.",
    "Shared regions by state": (
        "HAMi-core regions by state: ok, initialising, skipped (never exported as idle)."
    ),
    "Region skips by reason": "Regions that started being skipped or clamped, per second, by reason.",
    "NVML errors by call": "Failed NVML calls of the monitor, per second, by call.",
    # node and device
    "GPU memory used": "Physical device memory used and total, from NVML.",
    "GPU utilisation": "NVML GPU utilisation of each card (0-100).",
    "Temperature": "Core temperature of each card.",
    "Power": "Power draw of each card.",
    "XID and ECC errors": "New XID and ECC errors per card; an unhealthy card inhibits its XID alert.",
    "Health events": "NVML health events the device plugin handled, by card and action.",
    "GPU memory allocated vs limit": (
        "Memory the scheduler allocated on each card against its schedulable memory."
    ),
    "GPU cores allocated": "Cores the scheduler allocated on each card (percent of the card).",
    "Shared containers vs split count": "Containers on each card against its split limit (deviceSplitCount).",
    "Physical memory used / total": (
        "Physical memory in use per card; near full on an over-committed card means OOMs."
    ),
    # scheduler
    "Leader": "1 on the replica that binds and writes handshakes.",
    "Cache synced": "1 once the informers synced and a register pass completed.",
    "Pending GPU pods": "GPU pods Pending, counted once across replicas (hami_scheduler_pending_pods).",
    "Nodes with expired handshake": "Nodes the scheduler dropped: handshake expired and no allocatable GPU.",
    "Nodes by state": "Nodes by registration state as the register pass sees them.",
    "Filter latency": (
        "/filter latency, p50 and p99 by result; with tracing on, the exemplars (dots) lead to the "
        "pod's trace."
    ),
    "Bind latency": (
        "/bind latency, p50 and p99 by result; with tracing on, the exemplars (dots) lead to the "
        "pod's trace."
    ),
    "Pod creation to bind": (
        "From a GPU pod's creation to its bind, p50 and p99: the wait users feel. With tracing on, the "
        "exemplars (dots) lead to a slow pod's trace, webhook to bind."
    ),
    "Bind phases (p99)": "p99 of each bind phase: node lock, pod patch, Binding.",
    "Events by reason": "Pod events the extender recorded, per second, by reason.",
    "Unschedulable pods": "Filter calls for which no node fitted, per second.",
    "Locks held": "Nodes carrying a hami.io/mutex.lock annotation.",
    "Lock wait": "Time binds spend acquiring the node lock, p50 and p99.",
    "Expired locks": "Node locks the scheduler took over because they expired or their owner was gone.",
    "Requests by code": "The scheduler's Kubernetes API requests per second, by HTTP code.",
    "Request latency": "The scheduler's Kubernetes API request latency, p50 and p99 by verb.",
    "Rate-limiter wait (mean)": (
        "Mean wait in the client-side rate limiter; above the line, raise --kube-qps."
    ),
    "CPU": "CPU seconds per second of each scheduler replica.",
    "Resident memory": "Resident memory of each scheduler replica.",
    # tuning
    "Nodes (tier boundaries at 50 and 200)": "Nodes the scheduler sees; the tiers of the QPS/burst table.",
}
