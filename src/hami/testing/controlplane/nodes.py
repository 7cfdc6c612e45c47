"""A Node as the real kube-scheduler needs it when no kubelet and no node lifecycle controller run:
created through the API (as a kubelet registers), then given the status a kubelet reports."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
# What the simulated nodes offer besides their GPUs: enough that CPU, memory and pod count never
# decide a placement in these tests.
CAPACITY = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti"}


def ready_status(gpus: int = 0) -> Obj:
    """A kubelet's status: Ready, no pressure, ``gpus`` ``nvidia.com/gpu`` allocatable (the device
    plugin's count: cards times deviceSplitCount). The Ready condition is never refreshed and that is
    fine: only the node lifecycle controller (not running) would taint a node whose heartbeat stops."""
    resources = {**CAPACITY, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    conditions = [
        {"type": t, "status": "False", "reason": f"KubeletHas{r}", "message": f"kubelet has {m}"}
        for t, r, m in (
            ("MemoryPressure", "SufficientMemory", "sufficient memory available"),
            ("DiskPressure", "NoDiskPressure", "no disk pressure"),
            ("PIDPressure", "SufficientPID", "sufficient PID available"),
        )
    ]
    conditions.append(
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is ready"}
    )
    return {
        "capacity": resources,
        "allocatable": resources,
        "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "nodeInfo": {
            "architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "v1.37.2",
            "kubeProxyVersion": "", "containerRuntimeVersion": "containerd://simulated", "kernelVersion": "",
            "osImage": "simulated", "machineID": "", "systemUUID": "", "bootID": "",
        },
    }
