"""Annotation and label keys shared by every component (docs/design/scheduler-annotations.md §1–§2)."""

from typing import Final

VENDOR_NVIDIA: Final = "NVIDIA"

# Node annotations.
NODE_REGISTER: Final = "hami.io/node-nvidia-register"
NODE_PAIR_SCORE: Final = "hami.io/node-nvidia-score"
NODE_HANDSHAKE: Final = "hami.io/node-handshake"
NODE_DEVICE_CORDON: Final = "hami.io/device-cordon"
NODE_LOCK: Final = "hami.io/mutex.lock"

# Pod annotations written by the scheduler and the device plugin.
POD_VGPU_NODE: Final = "hami.io/vgpu-node"  # also a label
POD_VGPU_TIME: Final = "hami.io/vgpu-time"
POD_DEVICES_TO_ALLOCATE: Final = "hami.io/vgpu-devices-to-allocate"
POD_DEVICES_ALLOCATED: Final = "hami.io/vgpu-devices-allocated"
POD_MIG_ALLOCATIONS: Final = "hami.io/vgpu-mig-allocations"
POD_BIND_PHASE: Final = "hami.io/bind-phase"
POD_BIND_TIME: Final = "hami.io/bind-time"
# (hami-py) The pod's trace context, written by the webhook with --enable-tracing (hami.core.tracing).
POD_TRACE_CONTEXT: Final = "hami.io/trace-context"
SCHEDULER_ROLE_LABEL: Final = "hami.io/scheduler-role"

BIND_PHASE_ALLOCATING: Final = "allocating"
BIND_PHASE_SUCCESS: Final = "success"
BIND_PHASE_FAILED: Final = "failed"

# Pod annotations set by users.
POD_NODE_SCHEDULER_POLICY: Final = "hami.io/node-scheduler-policy"
POD_GPU_SCHEDULER_POLICY: Final = "hami.io/gpu-scheduler-policy"
POD_DEVICE_SCORING_WEIGHTS: Final = "hami.io/device-scoring-weights"
POD_USE_GPUTYPE: Final = "nvidia.com/use-gputype"
POD_NOUSE_GPUTYPE: Final = "nvidia.com/nouse-gputype"
POD_USE_GPUUUID: Final = "nvidia.com/use-gpuuuid"
POD_NOUSE_GPUUUID: Final = "nvidia.com/nouse-gpuuuid"
POD_NUMA_BIND: Final = "nvidia.com/numa-bind"
POD_VGPU_MODE: Final = "nvidia.com/vgpu-mode"
# Ours: the memory enforcement a pod's cards must run (hami-core or driver; absent = either).
POD_MEMORY_ENFORCEMENT: Final = "hami.io/memory-enforcement"
POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"

# Resource names (defaults; HAMi's device config can rename them).
RESOURCE_GPU: Final = "nvidia.com/gpu"
RESOURCE_GPUMEM: Final = "nvidia.com/gpumem"
RESOURCE_GPUMEM_PERCENTAGE: Final = "nvidia.com/gpumem-percentage"
RESOURCE_GPUCORES: Final = "nvidia.com/gpucores"
