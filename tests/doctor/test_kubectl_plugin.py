"""``kubectl hami`` through kubectl's own plugin mechanism (docs/guides/kubectl-plugin.md): the
real kubectl (the control plane's, built at the pinned version) finds the ``kubectl-hami`` console
script pip installed in this environment on PATH and runs it; kubectl's --kubeconfig, --context and
-n/--namespace choose the cluster and the pod's namespace; a pod with a trace context shows its
trace ID."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami.core import tracing
from hami.doctor.kubectl import context_namespace, translate
from hami.testing import controlplane
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.processes import python_env
from tests.doctor.doctorcluster import hami_node, hami_pod, scheduler_pod

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
# pip's console script for pyproject's [project.scripts] kubectl-hami, beside this interpreter
PLUGIN = Path(sys.executable).parent / "kubectl-hami"


@pytest.fixture
def kubeconfig(kube_api: KubeAPIServer, tmp_path: Path) -> Path:
    """The emulator's kubeconfig, plus a context ``team`` whose namespace is team-a."""
    config: dict[str, Any] = kube_api.kubeconfig()
    base = config["contexts"][0]["context"]
    config["contexts"].append({"name": "team", "context": {**base, "namespace": "team-a"}})
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def _kubectl(kubectl: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real kubectl, with the console script's directory first on PATH for plugin discovery."""
    path = f"{PLUGIN.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = python_env(PATH=path, KUBECONFIG="/nonexistent")
    return subprocess.run([kubectl, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_kubectl_finds_and_runs_the_plugin_with_its_own_flags(
    kube_api: KubeAPIServer, kubeconfig: Path, control_plane_binaries: controlplane.Binaries
) -> None:
    assert os.access(PLUGIN, os.X_OK), f"{PLUGIN}: no console script (pip install -e . writes it)"
    kubectl = control_plane_binaries.kubectl
    listed = _kubectl(kubectl, "plugin", "list")
    assert str(PLUGIN) in listed.stdout, listed.stdout + listed.stderr
    context = f"00-{TRACE}-00f067aa0ba902b7-01;" + "0" * 32
    for obj in (
        scheduler_pod(), hami_node("gpu-node-01"),
        hami_pod("train", "team-a", annotations={tracing.ANNOTATION: context}),
    ):
        kube_api.store.put(obj)
    k = str(kubeconfig)
    runs = {
        "context namespace": ("hami", "pod", "train", "--context", "team", "--kubeconfig", k, "--json"),
        "-n": ("hami", "pod", "-n", "team-a", "train", f"--kubeconfig={k}", "--json"),
        "NS/NAME": ("hami", "pod", "team-a/train", "--kubeconfig", k, "--json"),
    }
    for how, args in runs.items():
        done = _kubectl(kubectl, *args)
        assert done.stderr == "", (how, done.stderr)
        report = json.loads(done.stdout)
        assert report["command"] == "pod team-a/train", how
        traced = [f for s in report["sections"] for f in s["findings"] if f["code"] == "pod.trace"]
        assert [f["summary"] for f in traced] == [f"trace ID {TRACE}"], how
    nodes = _kubectl(kubectl, "hami", "nodes", "--kubeconfig", k, "--json")
    assert [s["title"] for s in json.loads(nodes.stdout)["sections"]] == ["node gpu-node-01"], nodes.stderr
    # kubectl's default namespace: the pod is not in "default"
    missing = _kubectl(kubectl, "hami", "pod", "train", "--kubeconfig", k)
    assert missing.returncode == 3 and "pod default/train not found" in missing.stderr
    wrong = _kubectl(kubectl, "hami", "pod", "-n", "other", "team-a/train", "--kubeconfig", k)
    assert wrong.returncode == 3 and "not in namespace other" in wrong.stderr


def test_translate_keeps_the_doctors_own_flags() -> None:
    assert translate(["nodes", "--selector", "gpu=on", "--context", "c", "-n", "x"]) == [
        "nodes", "--selector", "gpu=on", "--context", "c",
    ]
    assert translate(["pod", "--scheduler-url", "http://s", "ns/p", "--kubeconfig=/k"]) == [
        "pod", "--scheduler-url", "http://s", "ns/p", "--kubeconfig", "/k",
    ]


def test_an_unreadable_kubeconfig_means_the_default_namespace(tmp_path: Path) -> None:
    assert context_namespace(str(tmp_path / "absent"), None) == "default"
    bad = tmp_path / "bad"
    bad.write_text("{not yaml", encoding="utf-8")
    assert context_namespace(str(bad), "team") == "default"
