"""charts/hami through Helm's own Go SDK: it renders with the default, development and production
values and with --set overrides, Helm's lint finds no error, every object passes the Kubernetes
schemas, each of the guides' values changes what it should, and bad values are refused with the
schema's message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hami.core import names
from hami.deviceplugin.config import PluginConfig, apply_device_yaml, apply_node_json
from hami.deviceplugin.health import parse_health_checks
from hami.exporter.feedback import MIG_APPLY_LOCK
from hami.scheduler.engine.device_config import load_nvidia_config
from hami.scheduler.extender import main as scheduler_main
from hami.testing import chart
from tests.deploy.manifests import Container

DEVELOPMENT = chart.EXAMPLES / "development.yaml"
PRODUCTION = chart.EXAMPLES / "production.yaml"
Obj = dict[str, Any]


def _container(objects: list[Obj], kind: str, workload: str, container: str) -> Obj:
    spec = chart.find(objects, kind, workload)["spec"]["template"]["spec"]
    (found,) = [c for c in spec["containers"] if c["name"] == container]
    return dict(found)


def _extender_args(objects: list[Obj]) -> list[str]:
    ext = _container(objects, "Deployment", names.SCHEDULER_DEPLOYMENT, names.EXTENDER_CONTAINER)
    return [str(a) for a in ext["args"]]


def _device_config(objects: list[Obj]) -> PluginConfig:
    cm = chart.find(objects, "ConfigMap", names.DEVICE_CONFIGMAP)
    return apply_device_yaml(PluginConfig(), cm["data"][names.DEVICE_CONFIG_KEY])


def _nvidia(objects: list[Obj]) -> Any:
    cm = chart.find(objects, "ConfigMap", names.DEVICE_CONFIGMAP)
    return load_nvidia_config(yaml.safe_load(cm["data"][names.DEVICE_CONFIG_KEY]))


@pytest.mark.parametrize(
    "values", [(), (DEVELOPMENT,), (PRODUCTION,)], ids=["default", "development", "production"]
)
def test_renders_lints_and_validates(values: tuple[Path, ...]) -> None:
    objects = chart.render(values)
    assert chart.validate(objects) == []
    assert chart.lint(chart.user_values(values)) == []
    # every flag reaches a parser that accepts it
    scheduler_main.build_parser().parse_args(_extender_args(objects))
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "DaemonSet", "ConfigMap", "MutatingWebhookConfiguration", "NetworkPolicy"} <= kinds


def test_defaults_are_hamis() -> None:
    objects = chart.render()
    args = scheduler_main.build_parser().parse_args(_extender_args(objects))
    assert (args.node_scheduler_policy, args.gpu_scheduler_policy) == ("binpack", "spread")
    assert args.leader_elect is True and args.debug is True and args.v == 4
    assert args.node_lock_timeout.total_seconds() == 300
    assert chart.find(objects, "Deployment", names.SCHEDULER_DEPLOYMENT)["spec"]["replicas"] == 1
    cfg = _device_config(objects)
    assert (cfg.device_split_count, cfg.device_memory_scaling, cfg.device_core_scaling) == (10, 1.0, 1.0)
    assert cfg.lib_cuda_log_level == "1"
    assert _nvidia(objects).gpu_core_policy == "default"
    # monitoring objects are opt-in, as in HAMi's chart (they need the Prometheus Operator's CRDs)
    assert not {o["kind"] for o in objects} & {"ServiceMonitor", "PrometheusRule"}


def test_the_tuning_guides_templates_render_as_written() -> None:
    dev = chart.render([DEVELOPMENT])
    cfg = _device_config(dev)
    assert (cfg.device_split_count, cfg.device_memory_scaling, cfg.lib_cuda_log_level) == (20, 2.0, "3")
    assert _nvidia(dev).gpu_core_policy == "disable"
    args = scheduler_main.build_parser().parse_args(_extender_args(dev))
    assert (args.node_scheduler_policy, args.gpu_scheduler_policy) == ("binpack", "binpack")

    prod = chart.render([PRODUCTION])
    cfg = _device_config(prod)
    assert (cfg.device_split_count, cfg.device_memory_scaling, cfg.lib_cuda_log_level) == (10, 1.0, "0")
    assert _nvidia(prod).gpu_core_policy == "force"
    args = scheduler_main.build_parser().parse_args(_extender_args(prod))
    assert (args.node_scheduler_policy, args.gpu_scheduler_policy) == ("spread", "spread")
    assert (args.kube_qps, args.kube_burst, args.leader_elect) == (50.0, 100, True)
    assert chart.find(prod, "Deployment", names.SCHEDULER_DEPLOYMENT)["spec"]["replicas"] == 2
    sched_cfg = yaml.safe_load(
        chart.find(prod, "ConfigMap", names.SCHEDULER_CONFIGMAP)["data"]["config.yaml"]
    )
    assert sched_cfg["leaderElection"]["leaderElect"] is True


# (--set expression, what it must change): every value the guides turn.
def _split(o: list[Obj]) -> object:
    return _device_config(o).device_split_count


def _scaling(o: list[Obj]) -> object:
    return _device_config(o).device_memory_scaling


def _args(o: list[Obj]) -> object:
    return _extender_args(o)


def _monitor_args(o: list[Obj]) -> object:
    return _container(o, "DaemonSet", names.MONITOR_DAEMONSET, names.MONITOR_CONTAINER)["args"]


def _extender_memory(o: list[Obj]) -> object:
    ext = _container(o, "Deployment", names.SCHEDULER_DEPLOYMENT, names.EXTENDER_CONTAINER)
    return ext["resources"]["limits"]["memory"]


def _lock_timeout(o: list[Obj]) -> object:
    return scheduler_main.build_parser().parse_args(_extender_args(o)).node_lock_timeout.total_seconds()


def _policies(o: list[Obj]) -> object:
    args = scheduler_main.build_parser().parse_args(_extender_args(o))
    return args.node_scheduler_policy, args.gpu_scheduler_policy


def _leader(o: list[Obj]) -> object:
    cfg = yaml.safe_load(chart.find(o, "ConfigMap", names.SCHEDULER_CONFIGMAP)["data"]["config.yaml"])
    return cfg["leaderElection"]["leaderElect"], scheduler_main.build_parser().parse_args(
        _extender_args(o)
    ).leader_elect


def _replicas(o: list[Obj]) -> object:
    return chart.find(o, "Deployment", names.SCHEDULER_DEPLOYMENT)["spec"]["replicas"]


def _log_level(o: list[Obj]) -> object:
    return _device_config(o).lib_cuda_log_level


def _core_policy(o: list[Obj]) -> object:
    return _nvidia(o).gpu_core_policy


def _node_config(o: list[Obj]) -> object:
    cm = chart.find(o, "ConfigMap", names.NODE_CONFIGMAP)
    cfg = apply_node_json(_device_config(o), cm["data"]["config.json"], "inference-pool-3")
    return cfg.device_split_count


GUIDE_VALUES = [
    ("devicePlugin.deviceSplitCount=20", _split, 20),
    ("devicePlugin.deviceMemoryScaling=1.5", _scaling, 1.5),
    ("scheduler.extender.extraArgs={--profiling}", _args, None),
    ("scheduler.extraArgs={-v=4}", _args, None),
    (
        "devicePlugin.monitor.extraArgs={-v=4}",
        _monitor_args,
        ["--metrics-bind-address=:9394", "--cgroup-root=/sys/fs/cgroup", "-v=4"],
    ),
    ("scheduler.extender.resources.limits.memory=2Gi", _extender_memory, "2Gi"),
    ("scheduler.nodeLockExpire=3m", _lock_timeout, 180.0),
    (
        "scheduler.defaultSchedulerPolicy.nodeSchedulerPolicy=spread,"
        "scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy=topology-aware",
        _policies,
        ("spread", "topology-aware"),
    ),
    ("scheduler.leaderElect=false", _leader, (False, False)),
    ("scheduler.replicas=3", _replicas, 3),
    ("devices.nvidia.libCudaLogLevel=0", _log_level, "0"),
    ("devices.nvidia.gpuCorePolicy=force", _core_policy, "force"),
]


@pytest.mark.parametrize(
    ("expression", "read", "want"), GUIDE_VALUES, ids=[v[0].split("=")[0] for v in GUIDE_VALUES]
)
def test_each_guide_value_changes_what_it_should(expression: str, read: Any, want: object) -> None:
    before, after = read(chart.render()), read(chart.render(sets=[expression]))
    assert before != after, expression
    if read is _args:
        # an extraArgs list lands, as given, at the end of the extender's arguments
        value = expression.split("{", 1)[1].rstrip("}")
        assert isinstance(after, list) and after[-1] == value
        scheduler_main.build_parser().parse_args(after)
    else:
        assert after == want, expression


def test_per_node_configuration_reaches_the_device_plugin(tmp_path: Path) -> None:
    """The tuning guide's mixed-cluster values file (section 4.4)."""
    values = tmp_path / "mixed.yaml"
    values.write_text(
        "devicePlugin:\n  deviceSplitCount: 10\n  nodeConfiguration:\n    config: |\n"
        '      {"nodeconfig": [{"name": "inference-pool-*", "devicesplitcount": 20},\n'
        '                      {"name": "training-pool-*", "devicesplitcount": 5}]}\n',
        encoding="utf-8",
    )
    objects = chart.render([values])
    assert _node_config(objects) == 20
    assert _node_config(chart.render()) == 10


def test_client_ca_off_drops_the_client_certificate_everywhere() -> None:
    objects = chart.render(sets=["scheduler.extender.clientCA.enabled=false"])
    assert not [a for a in _extender_args(objects) if a.startswith("--client-ca-file")]
    cfg = yaml.safe_load(chart.find(objects, "ConfigMap", names.SCHEDULER_CONFIGMAP)["data"]["config.yaml"])
    assert "certFile" not in cfg["extenders"][0]["tlsConfig"]
    assert not [o for o in objects if o["metadata"]["name"] == "hami-scheduler-client-tls"]
    assert chart.validate(objects) == []


def test_other_release_and_namespace() -> None:
    """Object names follow the release; labels (what the guides select on) do not."""
    objects = chart.render(release="gpu", namespace="hami-system")
    deployment = chart.find(objects, "Deployment", "gpu-hami-scheduler")
    assert deployment["metadata"]["namespace"] == "hami-system"
    assert deployment["spec"]["template"]["metadata"]["labels"][names.APP_LABEL] == names.SCHEDULER_APP
    (ext,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["command"] == ["hami-scheduler"]
    ]
    args = scheduler_main.build_parser().parse_args(ext["args"])
    assert (args.leader_elect_resource_name, args.leader_elect_resource_namespace) == (
        "gpu-hami-scheduler",
        "hami-system",
    )
    assert chart.validate(objects) == []


def _node_agents(objects: list[Obj]) -> tuple[Container, Container]:
    """The device plugin's and the monitor's containers, with their pods."""
    out = []
    for workload, name in (
        (names.DEVICE_PLUGIN_DAEMONSET, names.DEVICE_PLUGIN_CONTAINER),
        (names.MONITOR_DAEMONSET, names.MONITOR_CONTAINER),
    ):
        daemonset = chart.find(objects, "DaemonSet", workload)
        (spec,) = [c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == name]
        out.append(Container(daemonset, spec))
    return out[0], out[1]


def _read_only(c: Container, mount_path: str) -> bool:
    (mount,) = [v for v in c.spec["volumeMounts"] if v["mountPath"] == mount_path]
    return bool(mount.get("readOnly", False))


def test_node_agents_see_what_the_node_agent_features_need() -> None:
    """GPU not limited: the monitor in the host's PID namespace reads /proc/<pid>/cgroup there, with no
    hostPath /proc. MIG: the plugin's apply lock is the file the monitor watches, on the host. Health:
    HAMi's Xid checks only. CDI: nothing mounted for it under the default envvar strategy."""
    plugin, monitor = _node_agents(chart.render())
    assert monitor.pod["hostPID"] is True and "hostPID" not in plugin.pod
    assert monitor.args().proc_root == "/proc" and monitor.host_path_at("/proc") is None
    args = plugin.args()
    lock_dir = str(Path(MIG_APPLY_LOCK).parent)
    assert str(Path(args.mig_apply_lock).parent) == lock_dir
    assert plugin.host_path_at(lock_dir) == monitor.host_path_at(lock_dir) == lock_dir
    assert _read_only(monitor, lock_dir) and not _read_only(plugin, lock_dir)
    assert parse_health_checks(args.health_checks) == frozenset()
    assert [str(s) for s in args.device_list_strategy] == ["envvar"]
    assert plugin.host_path_at(args.cdi_spec_dir) is None


@pytest.mark.parametrize("strategy", ["cdi-cri", "envvar,cdi-annotations"])
def test_a_cdi_strategy_mounts_the_hosts_cdi_spec_directory(strategy: str) -> None:
    escaped = strategy.replace(",", "\\,")  # --set splits on a bare comma
    objects = chart.render(sets=[f"devicePlugin.deviceListStrategy={escaped}"])
    plugin, _ = _node_agents(objects)
    args = plugin.args()
    assert ",".join(str(s) for s in args.device_list_strategy) == strategy
    # the runtime reads the spec on the host, at the path the plugin writes it inside
    assert plugin.host_path_at(args.cdi_spec_dir) == args.cdi_spec_dir == "/var/run/cdi"
    assert not _read_only(plugin, "/var/run/cdi")
    assert chart.validate(objects) == []


def test_health_checks_and_host_pid_values() -> None:
    objects = chart.render(
        sets=["devicePlugin.healthChecks=ecc\\,retired-pages", "devicePlugin.monitor.hostPID=false"]
    )
    plugin, monitor = _node_agents(objects)
    assert parse_health_checks(plugin.args().health_checks) == {"ecc", "retired-pages"}
    assert "hostPID" not in monitor.pod
    assert chart.validate(objects) == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"devicePlugin": {"deviceSplitCount": -1}},
            "at '/devicePlugin/deviceSplitCount': minimum: got -1, want 1",
        ),
        (
            {"devicePlugin": {"deviceSplitCount": "20"}},
            "at '/devicePlugin/deviceSplitCount': got string, want integer",
        ),
        ({"devicePlugin": {"deviceMemoryScaling": 0}}, "at '/devicePlugin/deviceMemoryScaling'"),
        ({"devicePlugin": {"deviceMemoryScaling": "-1"}}, "at '/devicePlugin/deviceMemoryScaling'"),
        (
            {"scheduler": {"defaultSchedulerPolicy": {"nodeSchedulerPolicy": "random"}}},
            "value must be one of 'binpack', 'spread'",
        ),
        (
            {"devices": {"nvidia": {"gpuCorePolicy": "strict"}}},
            "value must be one of 'default', 'force', 'disable'",
        ),
        ({"scheduler": {"leaderElect": "yes"}}, "at '/scheduler/leaderElect': got string, want boolean"),
        ({"scheduler": {"nodeLockExpire": "5 minutes"}}, "at '/scheduler/nodeLockExpire'"),
        ({"devicePlugin": {"deviceSplitcount": 20}}, "additional properties 'deviceSplitcount' not allowed"),
        ({"devicePlugin": {"deviceListStrategy": "cdi"}}, "at '/devicePlugin/deviceListStrategy'"),
        ({"devicePlugin": {"healthChecks": "xid"}}, "at '/devicePlugin/healthChecks'"),
    ],
)
def test_bad_values_get_the_schemas_message(values: Obj, message: str) -> None:
    with pytest.raises(chart.ChartError) as refused:
        chart.render_templates(values)
    assert message in str(refused.value)
