"""`hami-doctor pod` on a running vGPU pod: the "GPU not limited" walk over the node's HAMi-core files."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hami.demo.simhost import PodDrivenNode
from hami.testing import cluster
from hami.testing.kubeapi import KubeAPIServer
from tests.doctor.doctorcluster import REGISTER, codes, hami_node, run_json, scheduler_pod

UID = "7c1e7f0a-3b2d-4c5e-8f90-a1b2c3d4e5f6"
GPU = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"


def running_pod(env: dict[str, str] | None = None, phase: str = "Running") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer",
            "namespace": "ml",
            "uid": UID,
            "annotations": {
                "hami.io/vgpu-node": "gpu-node-01",
                "hami.io/bind-phase": "success",
                "hami.io/vgpu-devices-allocated": f";{GPU},NVIDIA,4000,30:;",
            },
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "nodeName": "gpu-node-01",
            "initContainers": [{"name": "setup", "image": "busybox"}],
            "containers": [
                {
                    "name": "main",
                    "image": "cuda",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}},
                    "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                },
                {"name": "sidecar", "image": "envoy"},
            ],
        },
        "status": {"phase": phase},
    }


def node_files(
    hook: Path,
    *,
    library: bytes | None = b"\x7fELF",
    preload: str | None = "",
    ctr_dir: bool = True,
    region: bool = True,
) -> None:
    """The node's ``$HOOK_PATH/vgpu``: all in place by default, ``preload`` "" meaning the right one."""
    vgpu = hook / "vgpu"
    vgpu.mkdir(parents=True)
    if library is not None:
        (vgpu / "libvgpu.so").write_bytes(library)
    if preload is not None:
        (vgpu / "ld.so.preload").write_text(preload or f"{vgpu}/libvgpu.so\n", encoding="utf-8")
    if ctr_dir:
        (vgpu / "containers" / f"{UID}_main").mkdir(parents=True)
        if region:
            (vgpu / "containers" / f"{UID}_main" / "0b1c.cache").write_bytes(b"\x4e\xf7\x2f\x01")


CASES: dict[str, tuple[Callable[[Path], None], dict[str, str], int, list[str]]] = {
    "all-in-place": (
        node_files, {}, 0, ["gpulimit.library.present", "gpulimit.preload.present", "gpulimit.region.present"]
    ),
    "control-disabled": (node_files, {"CUDA_DISABLE_CONTROL": "true"}, 1, ["gpulimit.control-disabled"]),
    "no-library": (lambda h: node_files(h, library=None), {}, 2, ["gpulimit.library.missing"]),
    "empty-library": (lambda h: node_files(h, library=b""), {}, 2, ["gpulimit.library.missing"]),
    "no-preload": (
        lambda h: node_files(h, preload=None), {}, 2, ["gpulimit.library.present", "gpulimit.preload.missing"]
    ),
    "preload-without-libvgpu": (
        lambda h: node_files(h, preload="/lib/other.so\n"), {}, 2,
        ["gpulimit.library.present", "gpulimit.preload.missing"],
    ),
    "no-cache-dir": (
        lambda h: node_files(h, ctr_dir=False), {}, 2,
        ["gpulimit.library.present", "gpulimit.preload.present", "gpulimit.cache-dir.missing"],
    ),
    "no-region": (
        lambda h: node_files(h, region=False), {}, 1,
        ["gpulimit.library.present", "gpulimit.preload.present", "gpulimit.region.missing"],
    ),
    "files-not-here": (lambda h: None, {}, 1, ["gpulimit.node-files.unseen"]),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_walk_stops_at_the_first_broken_step(
    case: str, api: KubeAPIServer, kube_config_file: Path, tmp_path: Path
) -> None:
    make, env, exit_code, expected = CASES[case]
    hook = tmp_path / "hook"
    make(hook)
    for obj in (scheduler_pod(), hami_node("gpu-node-01"), running_pod(env)):
        api.store.put(obj)
    code, doc = run_json(kube_config_file, "pod", "ml/trainer", "--hook-path", str(hook))
    (limits,) = [s for s in doc["sections"] if s["title"] == "pod ml/trainer: GPU limits"]
    assert [f["code"] for f in limits["findings"]] == expected  # the sidecar holds no vGPU: not walked
    assert code == exit_code
    if case == "no-cache-dir":
        (missing,) = [f for f in limits["findings"] if f["code"] == "gpulimit.cache-dir.missing"]
        assert missing["evidence"] == [f"no directory {hook}/vgpu/containers/{UID}_main"]
    if case == "files-not-here":
        assert "hami-doctor pod <namespace>/<pod> --hook-path" in limits["findings"][0]["fix"]


def test_a_pending_pod_gets_no_gpu_limit_walk(
    api: KubeAPIServer, kube_config_file: Path, tmp_path: Path
) -> None:
    node_files(tmp_path / "hook", library=None)
    for obj in (scheduler_pod(), hami_node("gpu-node-01"), running_pod(phase="Pending")):
        api.store.put(obj)
    _, doc = run_json(kube_config_file, "pod", "ml/trainer", "--hook-path", str(tmp_path / "hook"))
    assert [s["title"] for s in doc["sections"]] == ["pod ml/trainer"]
    assert not [c for c in codes(doc) if c.startswith("gpulimit.")]


VERDICTS = {"hami-core": ("broken", 2), "driver": ("warning", 1)}  # mode -> (severity, exit code)


@pytest.mark.parametrize("mode", VERDICTS)
def test_a_broken_hami_core_step_is_a_warning_where_the_driver_limits_memory(
    mode: str, api: KubeAPIServer, kube_config_file: Path, tmp_path: Path
) -> None:
    """No libvgpu.so on the node: unlimited memory in HAMi-core mode; in driver mode the driver still
    holds the memory limit and only the core limit is lost."""
    severity, exit_code = VERDICTS[mode]
    hook = tmp_path / "hook"
    node_files(hook, library=None)
    register = REGISTER
    if mode == "driver":
        register = REGISTER.replace('"health":true}', '"health":true,"memoryEnforcement":"driver"}')
    for obj in (scheduler_pod(), hami_node("gpu-node-01", register=register), running_pod()):
        api.store.put(obj)
    code, doc = run_json(kube_config_file, "pod", "ml/trainer", "--hook-path", str(hook))
    (limits,) = [s for s in doc["sections"] if s["title"] == "pod ml/trainer: GPU limits"]
    got = [(f["code"], f["severity"]) for f in limits["findings"]]
    expected = [("gpulimit.library.missing", severity)]
    assert got == ([("gpulimit.memory.driver", "ok"), *expected] if mode == "driver" else expected)
    assert code == exit_code


def test_the_demos_driver_limited_pod_is_limited_for_the_doctor_as_for_the_monitor(
    api: KubeAPIServer, kube_config_file: Path, tmp_path: Path
) -> None:
    """scenarios/driver-limited as the demo runs it on driver-node: HAMi-core loaded (no
    CUDA_DISABLE_CONTROL), its region there, the memory limit the driver's. The walk says so and
    finds nothing to warn about, as the monitor counts it limited."""
    objects = cluster.objects(4, datetime(2025, 6, 13, 9, 10, tzinfo=UTC), scenarios=True)
    (driver_node,) = [o for o in objects if o["metadata"]["name"] == cluster.DRIVER_NODE]
    placed = cluster._with_status(cluster.DRIVER_LIMITED)  # bound to driver-node, its container started
    placed["metadata"]["uid"] = UID
    placed["metadata"]["annotations"].update(cluster.driver_limited_pod()["metadata"]["annotations"])
    hook = tmp_path / "hook"
    node = PodDrivenNode(
        str(hook / "vgpu"), 1, lambda: [placed], str(tmp_path / "proc"), node=cluster.DRIVER_NODE
    )
    node.step()  # the container's first CUDA call: HAMi-core's region
    node.stop()
    for obj in (scheduler_pod(), driver_node, placed):
        api.store.put(obj)
    _, doc = run_json(kube_config_file, "pod", "scenarios/driver-limited", "--hook-path", str(hook))
    (limits,) = [s for s in doc["sections"] if s["title"] == "pod scenarios/driver-limited: GPU limits"]
    assert [(f["code"], f["severity"]) for f in limits["findings"]] == [
        ("gpulimit.memory.driver", "ok"),
        ("gpulimit.library.present", "ok"),
        ("gpulimit.preload.present", "ok"),
        ("gpulimit.region.present", "ok"),
    ]
