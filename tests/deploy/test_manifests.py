"""deploy/: well-formed objects, flags the daemons really accept, ports, probes, host paths and config."""

from __future__ import annotations

import shutil
import subprocess
import tomllib

import pytest
import yaml

from hami.core import names
from hami.deviceplugin.config import PluginConfig, apply_device_yaml, apply_node_json
from hami.exporter.config import load_config
from hami.scheduler.engine.device_config import load_nvidia_config
from tests.deploy import manifests as m

CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
}


def test_every_yaml_file_is_listed_and_parses() -> None:
    on_disk = {p.name for p in m.DEPLOY.glob("*.yaml")} - {"kustomization.yaml", "values.yaml"}
    assert {p.name for p in m.resource_files()} == on_disk
    for path in m.resource_files():
        list(yaml.safe_load_all(path.read_text(encoding="utf-8")))


def test_every_object_is_named_and_namespaced_where_it_must_be() -> None:
    seen: set[tuple[str, str, str]] = set()
    for obj in m.objects():
        assert obj.get("apiVersion") and obj.get("kind"), obj
        meta = obj.get("metadata") or {}
        assert meta.get("name"), obj
        key = (obj["kind"], meta.get("namespace", ""), meta["name"])
        assert key not in seen, f"duplicate {key}"
        seen.add(key)
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, key
        else:
            assert meta.get("namespace") == m.NAMESPACE, key


def test_commands_are_the_console_scripts_and_parse_with_the_real_parsers() -> None:
    pyproject = tomllib.loads((m.ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    scripts = pyproject["project"]["scripts"]
    programs = []
    for c in m.containers():
        if c.spec["image"].startswith("registry.k8s.io/"):
            continue
        assert c.program in scripts, c.program
        c.args()  # argparse exits (SystemExit) on any flag or value the daemon would reject
        programs.append(c.program)
    assert sorted(programs) == sorted(m.PARSERS)


def test_the_monitor_starts_with_its_container_environment() -> None:
    c = m.hami_container("hami-monitor")
    assert c.env("NODE_NAME")["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    env = {"HOOK_PATH": c.env("HOOK_PATH")["value"], "NODE_NAME": "gpu-node-1"}
    cfg = load_config([*c.spec["command"][1:], *c.spec.get("args", [])], env)
    assert cfg.hook_path == "/usr/local/vgpu"
    assert c.spec["name"] == names.MONITOR_CONTAINER


def test_metrics_ports_match_the_bind_address_and_probes_hit_them() -> None:
    for c in m.containers():
        if c.program not in m.PARSERS:
            continue
        port = m.bind_port(c.args().metrics_bind_address)
        assert port in {p["containerPort"] for p in c.spec["ports"]}, c.program
        assert c.spec["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert c.spec["readinessProbe"]["httpGet"]["path"] == "/readyz"
        for probe in ("livenessProbe", "readinessProbe"):
            assert c.port(c.spec[probe]["httpGet"]["port"]) == port, (c.program, probe)
    assert {m.bind_port(m.hami_container(p).args().metrics_bind_address) for p in m.PARSERS} == {
        9394,
        9395,
        9396,
    }


def test_node_agents_host_paths() -> None:
    plugin, monitor = m.hami_container("hami-device-plugin"), m.hami_container("hami-monitor")
    assert plugin.workload == m.find("DaemonSet", names.DEVICE_PLUGIN_DAEMONSET)
    assert monitor.workload == m.find("DaemonSet", names.MONITOR_DAEMONSET)
    for c in (plugin, monitor):
        assert c.pod["nodeSelector"] == {"gpu": "on"}
        assert c.env("NODE_NAME")["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    args = plugin.args()
    # Allocate hands host paths to the kubelet, so each must be the same path inside the plugin.
    for path in (args.device_plugin_path, f"{args.hook_path.rstrip('/')}/vgpu", args.vgpu_lock_dir):
        assert plugin.host_path_at(path) == path.rstrip("/"), path
    assert plugin.host_path_at("/var/lib/kubelet/device-plugins") == "/var/lib/kubelet/device-plugins"
    containers_dir = f"{monitor.env('HOOK_PATH')['value']}/containers"
    assert monitor.host_path_at(containers_dir) == "/usr/local/vgpu/containers"
    # the plugin creates <hook>/vgpu/containers/<uid>_<ctr>; the monitor must read the same directory
    assert f"{args.hook_path.rstrip('/')}/vgpu/containers" == containers_dir


def test_guide_names() -> None:
    """The names the guides type: labels, workloads, containers, ConfigMaps, the default container."""
    deployment = m.find("Deployment", names.SCHEDULER_DEPLOYMENT)
    daemonset = m.find("DaemonSet", names.DEVICE_PLUGIN_DAEMONSET)
    for workload, app, first in (
        (deployment, names.SCHEDULER_APP, names.EXTENDER_CONTAINER),
        (daemonset, names.DEVICE_PLUGIN_APP, names.DEVICE_PLUGIN_CONTAINER),
        (m.find("DaemonSet", names.MONITOR_DAEMONSET), names.MONITOR_APP, names.MONITOR_CONTAINER),
    ):
        template = workload["spec"]["template"]
        labels = template["metadata"]["labels"]
        assert labels[names.APP_LABEL] == app and labels[names.COMPONENT_LABEL] == app
        assert m.labels_match(workload["spec"]["selector"]["matchLabels"], labels)
        assert template["metadata"]["annotations"][names.DEFAULT_CONTAINER_ANNOTATION] == first
        # the first container is kubectl's pick even where the annotation is not read
        assert template["spec"]["containers"][0]["name"] == first
    assert m.hami_container("hami-scheduler").spec["name"] == names.EXTENDER_CONTAINER
    assert m.hami_container("hami-device-plugin").spec["name"] == names.DEVICE_PLUGIN_CONTAINER
    for cm in (names.DEVICE_CONFIGMAP, names.SCHEDULER_CONFIGMAP, names.NODE_CONFIGMAP):
        m.find("ConfigMap", cm)
    assert names.DEVICE_CONFIG_KEY in m.find("ConfigMap", names.DEVICE_CONFIGMAP)["data"]


def test_extender_knows_its_pod_from_the_downward_api() -> None:
    c = m.hami_container("hami-scheduler")
    assert c.env("POD_NAME")["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert c.env("POD_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_every_container_is_locked_down() -> None:
    """No privilege escalation, no capability, a read-only root filesystem; non-root except the
    two node agents, which need root's host paths (the chart's values say why)."""
    root = {names.DEVICE_PLUGIN_CONTAINER, names.MONITOR_CONTAINER}
    seen = set()
    for c in m.containers():
        sc = c.spec["securityContext"]
        pod_sc = c.pod.get("securityContext") or {}
        name = c.spec["name"]
        seen.add(name)
        assert sc["allowPrivilegeEscalation"] is False, name
        assert sc["readOnlyRootFilesystem"] is True, name
        assert sc["capabilities"] == {"drop": ["ALL"]}, name
        assert "privileged" not in sc, name
        assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}, name
        if name in root:
            assert sc["runAsUser"] == 0, name
        else:
            assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0, name
        for volume in c.pod.get("volumes", []):
            assert "hostPath" not in volume or name in root, (name, volume)
    assert seen == {names.EXTENDER_CONTAINER, names.KUBE_SCHEDULER_CONTAINER, *root}


def _config_map_file(container: m.Container, path: str) -> str:
    mount, name = path.rsplit("/", 1)
    volume = container.volume_at(mount)
    cm = m.find("ConfigMap", volume["configMap"]["name"])
    return str(cm["data"][name])


def test_device_config_loads_in_plugin_and_scheduler() -> None:
    plugin, sched = m.hami_container("hami-device-plugin"), m.hami_container("hami-scheduler")
    p_args, s_args = plugin.args(), sched.args()
    text = _config_map_file(plugin, p_args.config_file)
    assert text == _config_map_file(sched, s_args.device_config_file)
    cfg = apply_device_yaml(PluginConfig(), text)
    # the tuning guide's production template: deviceSplitCount 10, deviceMemoryScaling 1.0, libCudaLogLevel 0
    assert (cfg.device_split_count, cfg.device_memory_scaling, cfg.lib_cuda_log_level) == (10, 1.0, "0")
    node_cfg = apply_node_json(cfg, _config_map_file(plugin, p_args.node_config_file), "gpu-node-1")
    assert node_cfg == cfg
    nvidia = load_nvidia_config(yaml.safe_load(text))
    assert nvidia.resource_count_name == "nvidia.com/gpu"


def test_scheduler_production_settings() -> None:
    deploy = m.find("Deployment", "hami-scheduler")
    assert deploy["spec"]["replicas"] == 2
    args = m.hami_container("hami-scheduler").args()
    assert args.leader_elect is True
    assert (args.kube_qps, args.kube_burst) == (50.0, 100)
    assert args.node_lock_timeout.total_seconds() == 300
    assert (args.node_scheduler_policy, args.gpu_scheduler_policy) == ("spread", "spread")


def _built() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    done = subprocess.run(
        [kubectl, "kustomize", str(m.DEPLOY)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kustomize_builds_with_pinned_images() -> None:
    built = [d for d in yaml.safe_load_all(_built()) if d]
    assert len(built) == len(m.objects())
    images = {
        c["image"]
        for d in built
        if d["kind"] in ("Deployment", "DaemonSet")
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"ghcr.io/hami-py/hami:0.1.0", "registry.k8s.io/kube-scheduler:v1.31.4"}
    namespaces = {d["metadata"].get("namespace") for d in built} - {None}
    assert namespaces == {m.NAMESPACE}


def test_docs_start_with_helm_and_name_the_kustomize_way() -> None:
    doc = (m.ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    first_command = doc[doc.index("```sh") :].splitlines()[1]
    assert first_command.startswith("helm install hami charts/hami"), first_command
    assert "kubectl apply -k deploy/" in doc
