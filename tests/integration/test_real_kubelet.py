"""The device plugin with a real kubelet (``hami.testing.controlplane.kubelet``: built from
k8s.io/kubernetes at the control plane's version, Debian's containerd and runc, a local busybox-static
image): ``hami-device-plugin`` (fake NVML) registers on the kubelet's ``kubelet.sock``, the kubelet
advertises its vGPUs, the real kube-scheduler and the extender bind a GPU pod there, and the kubelet
calls the plugin's Allocate for it (the plugin then marks the pod ``bind-phase: success``); the
container then runs and sees the environment Allocate gave it (docs/design/real-kubelet.md)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami.core import annotations as ann
from hami.testing import builders, cluster
from hami.testing.controlplane import kubelet
from hami.testing.controlplane.dedicated import OWNER_LABEL, TAINT, cards_of, create, remove
from hami.testing.controlplane.deploy import Hami
from hami.testing.processes import log_tail
from hami.testing.wait import wait_until

# bounded waits of a few minutes each on a loaded 2-core machine, beyond the default 300 s
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
Obj = dict[str, Any]
NODE = "kubelet-gpu"
OWNER = "real-kubelet"
CARDS, SPLIT = 2, 10
WAIT_S = 240.0  # image import, pod sandbox and container start on a loaded 2-core machine


def require(problem: str | None) -> None:
    """Where the kubelet cannot run: a failure in CI (CI=true), a skip saying why elsewhere."""
    if problem is None:
        return
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"a real kubelet cannot run here: {problem}", pytrace=False)
    pytest.skip(f"a real kubelet cannot run here: {problem}")


@pytest.fixture
def real_kubelet(hami: Hami, tmp_path: Path) -> Iterator[kubelet.RealKubelet]:
    require(kubelet.problem())
    node = kubelet.RealKubelet(
        hami.cp, tmp_path, NODE, labels={OWNER_LABEL: OWNER}, taints=[f"{TAINT}={OWNER}:NoSchedule"]
    )
    try:
        node.start()
        yield node
    finally:
        node.stop()
        remove(hami.cp, OWNER)


def gpu_pod(name: str, out: Path) -> Obj:
    """A busybox pod asking for one vGPU that writes its environment to ``out`` on the host."""
    pod = builders.gpu_pod(name, mem=3000, namespace="default", labels={OWNER_LABEL: OWNER})
    (container,) = pod["spec"]["containers"]
    container.update({
        "image": kubelet.BUSYBOX_IMAGE, "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", "env > /out/env.part && mv /out/env.part /out/env && exec sleep 3600"],
        "volumeMounts": [{"name": "out", "mountPath": "/out"}],
    })  # fmt: skip
    pod["spec"]["volumes"] = [{"name": "out", "hostPath": {"path": str(out), "type": "Directory"}}]
    pod["spec"]["nodeSelector"] = {OWNER_LABEL: OWNER}
    pod["spec"]["tolerations"] = [{"key": TAINT, "operator": "Equal", "value": OWNER, "effect": "NoSchedule"}]
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    # no pod network here: containerd's CNI has only the loopback plugin, which gives no address
    pod["spec"]["hostNetwork"] = True
    pod.pop("status")
    return pod


def test_the_device_plugin_registers_with_a_real_kubelet_which_calls_allocate_for_a_real_pod(
    hami: Hami, real_kubelet: kubelet.RealKubelet, tmp_path: Path
) -> None:
    cp = hami.cp
    hook = tmp_path / "hook"
    (hook / "vgpu").mkdir(parents=True)
    (hook / "vgpu" / "libvgpu.so").write_bytes(b"")  # busybox is static: nothing is preloaded
    (hook / "vgpu" / "ld.so.preload").write_text("", encoding="utf-8")
    spec = tmp_path / "fake-nvml.yaml"
    spec.write_text(yaml.safe_dump(cluster.fake_nvml_spec(CARDS)), encoding="utf-8")
    plugin = cp.procs.start("device-plugin", [
        sys.executable, "-u", "-m", "hami.deviceplugin", "--node-name", NODE, "--nvml", "fake",
        "--fake-nvml-spec", str(spec), "--device-plugin-path", f"{real_kubelet.plugin_dir}/",
        "--hook-path", str(hook), "--vgpu-lock-dir", str(tmp_path / "vgpulock"),
        "--mig-apply-lock", str(tmp_path / "mig.lock"), "--node-config-file", str(tmp_path / "none.json"),
        "--device-split-count", str(SPLIT), "--metrics-bind-address", "127.0.0.1:0",
        "--kubeconfig", str(cp.kubeconfig), "-v", "4",
    ])  # fmt: skip
    try:

        def advertised() -> bool:
            with cp.session() as s:
                node = s.get(f"{cp.url}/api/v1/nodes/{NODE}", timeout=30).json()
            allocatable = (node.get("status") or {}).get("allocatable") or {}
            registered = ann.NODE_REGISTER in (node["metadata"].get("annotations") or {})
            return allocatable.get(ann.RESOURCE_GPU) == str(CARDS * SPLIT) and registered

        wait_until(advertised, WAIT_S, "the kubelet advertising the plugin's vGPUs", interval=1.0)
        out = tmp_path / "out"
        out.mkdir()
        create(cp, gpu_pod("on-a-real-kubelet", out))

        def allocated() -> Obj | None:
            with cp.session() as s:
                pod: Obj = s.get(
                    f"{cp.url}/api/v1/namespaces/default/pods/on-a-real-kubelet", timeout=30
                ).json()
            phase = (pod["metadata"].get("annotations") or {}).get(ann.POD_BIND_PHASE)
            return pod if phase == ann.BIND_PHASE_SUCCESS else None

        # the kubelet admits the pod, asks the device manager, which calls the plugin's Allocate
        pod = wait_until(allocated, WAIT_S, "the kubelet's Allocate for the pod", interval=1.0)
        assert pod["spec"]["nodeName"] == NODE
        (card,) = cards_of(pod)
        said = re.compile(
            r"Allocate for pod default/on-a-real-kubelet container c0: .*CUDA_DEVICE_MEMORY_LIMIT_0=3000m"
        )
        assert said.search(plugin.log.read_text(encoding="utf-8")), log_tail(plugin.log, 3000)
        assert card.startswith("GPU-")
        # containerd and runc start the container: it sees what Allocate gave it
        written = out / "env"
        wait_until(written.exists, WAIT_S, "the container to write its environment", interval=1.0)
        lines = written.read_text(encoding="utf-8").splitlines()
        env = dict(line.split("=", 1) for line in lines if "=" in line)
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
        assert plugin.alive()
    finally:
        cp.stop_child(plugin)
