"""The clusters the doctor tests load into the API emulator, at a fixed ``NOW``, and the doctor run
in this process against them (its text or its JSON)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from hami.doctor.main import main
from hami.testing.builders import node, pod

NOW = "2025-06-13T09:10:00Z"
UUID0 = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"
UUID1 = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
REGISTER = (
    f'[{{"id":"{UUID0}","count":10,"devmem":32768,"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB",'
    f'"mode":"hami-core","health":true}},{{"id":"{UUID1}","index":1,"count":10,"devmem":32768,'
    f'"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":1,"mode":"hami-core","health":true}}]'
)
FRESH_HANDSHAKE = "Requesting_2025-06-13 09:09:45"  # 15 s before NOW (handshakes are read as UTC here)
OLD_HANDSHAKE = "Requesting_2025-06-13 09:05:00"  # 5 min before NOW

Obj = dict[str, Any]


def hami_node(
    name: str,
    *,
    register: str | None = REGISTER,
    handshake: str | None = FRESH_HANDSHAKE,
    lock: str | None = None,
    gpus: int = 20,
    extra: dict[str, str] | None = None,
) -> Obj:
    """A node with HAMi's annotations as given (None: absent) and ``gpus`` allocatable vGPUs."""
    annos = {
        k: v
        for k, v in (
            ("hami.io/node-nvidia-register", register),
            ("hami.io/node-handshake", handshake),
            ("hami.io/mutex.lock", lock),
        )
        if v is not None
    }
    annos.update(extra or {})
    return node(name, annotations=annos, allocatable={"nvidia.com/gpu": str(gpus)} if gpus else {})


def hami_pod(
    name: str,
    namespace: str = "default",
    *,
    resources: dict[str, str] | None = None,
    scheduler: str = "hami-scheduler",
    annotations: dict[str, str] | None = None,
    node_name: str = "",
    phase: str = "Pending",
) -> Obj:
    """A pod for HAMi's scheduler; ``resources``: its one container's limits (default 1 GPU, 8 GiB)."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192"} if resources is None else resources
    main = {"name": "main", "image": "cuda", "resources": {"limits": limits}}
    return pod(main, name=name, namespace=namespace, annotations=annotations, node_name=node_name,
               scheduler=scheduler, phase=phase)


def scheduler_pod(
    name: str = "hami-scheduler-7d9f",
    *,
    running: bool = True,
    waiting: str = "",
    role: str = "leader",
    label: str = "app.kubernetes.io/component",
) -> Obj:
    labels = {label: "hami-scheduler"}
    if role:
        labels["hami.io/scheduler-role"] = role
    status: Obj = {
        "phase": "Running" if running else "Pending",
        "conditions": [{"type": "Ready", "status": "True" if running and not waiting else "False"}],
        "containerStatuses": [
            {
                "name": "vgpu-scheduler-extender",
                "restartCount": 7 if waiting else 0,
                "state": {"waiting": {"reason": waiting}} if waiting else {"running": {}},
            }
        ],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system", "labels": labels},
        "spec": {"containers": [{"name": "vgpu-scheduler-extender", "image": "hami"}]},
        "status": status,
    }


def run_doctor(kubeconfig: Path | None, *args: str, stdin: str = "") -> tuple[int, str]:
    """``hami-doctor ARGS`` at ``NOW`` (scheduler times read as UTC): exit code and output."""
    argv = [*args]
    if args and args[0] != "logs":
        argv += ["--kubeconfig", str(kubeconfig), "--scheduler-tz", "UTC"]
    argv += ["--now", NOW]
    out = io.StringIO()
    code = main(argv, stdin=io.StringIO(stdin), stdout=out)
    return code, out.getvalue()


def run_json(kubeconfig: Path | None, *args: str, stdin: str = "") -> tuple[int, Obj]:
    code, out = run_doctor(kubeconfig, *args, "--json", stdin=stdin)
    return code, json.loads(out)


def codes(doc: Obj) -> list[str]:
    """Every finding's code, section by section."""
    return [f["code"] for s in doc["sections"] for f in s["findings"]]
