"""The Helm chart ``charts/hami``, rendered and linted by Helm v4's own Go SDK (PyPI
``helm-python-sdk``: no ``helm`` binary), and its objects validated with ``kubernetes-validate``.

    objects = render(values_files=[EXAMPLES / "production.yaml"], sets=["devicePlugin.deviceSplitCount=20"])
    text = render_text(...)          # what `helm template hami charts/hami -n kube-system ...` prints
    problems = validate(objects)     # one line per object the Kubernetes schemas refuse

Values compose as Helm composes them: the chart's defaults, then each values file, then each
``--set`` expression (Helm's own parser), later ones winning key by key.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import yaml

from hami.core import names
from hami.core.duration import parse_duration
from hami.deviceplugin.config import PluginConfig, apply_device_yaml
from hami.scheduler.engine.device_config import load_nvidia_config
from hami.scheduler.extender import main as scheduler_main

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "hami"
EXAMPLES = CHART / "examples"
# The Kubernetes minor whose schemas the objects must satisfy (the chart's floor is 1.27; the
# kube-scheduler image it runs by default is 1.31).
KUBE_VERSION = "1.31"

Obj = dict[str, Any]
ChartError = helm.HelmError


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's coalescing: maps merge key by key, anything else in ``over`` replaces (lists too)."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def user_values(values_files: Iterable[Path] = (), sets: Iterable[str] = ()) -> dict[str, Any]:
    """``-f`` files, then ``--set`` expressions, as one values document."""
    values: dict[str, Any] = {}
    for path in values_files:
        values = merge(values, helm.values_from_yaml(Path(path).read_text(encoding="utf-8")))
    for expression in sets:
        values = merge(values, helm.parse_set_string(expression))
    return values


def render_templates(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = names.RELEASE,
    namespace: str = names.NAMESPACE,
) -> dict[str, str]:
    """Template path -> rendered text; raises ``ChartError`` (values refused by the schema, or a
    template that fails) with Helm's message."""
    with helm.Chart.load(CHART) as chart:
        return chart.render(dict(values or {}), name=release, namespace=namespace, is_install=True)


def _documents(rendered: Mapping[str, str]) -> list[tuple[str, Obj]]:
    out: list[tuple[str, Obj]] = []
    for path in sorted(rendered):
        if path.endswith("NOTES.txt"):
            continue
        out.extend((path, doc) for doc in yaml.safe_load_all(rendered[path]) if doc)
    return out


def render(
    values_files: Sequence[Path] = (),
    sets: Sequence[str] = (),
    *,
    release: str = names.RELEASE,
    namespace: str = names.NAMESPACE,
) -> list[Obj]:
    """Every object the chart renders, in template order."""
    values = user_values(values_files, sets)
    return [doc for _, doc in _documents(render_templates(values, release=release, namespace=namespace))]


def render_text(
    values_files: Sequence[Path] = (),
    sets: Sequence[str] = (),
    *,
    release: str = names.RELEASE,
    namespace: str = names.NAMESPACE,
) -> str:
    """The rendered objects as one multi-document YAML stream, each after a ``# Source:`` line."""
    values = user_values(values_files, sets)
    rendered = render_templates(values, release=release, namespace=namespace)
    parts = []
    for path, doc in _documents(rendered):
        body = yaml.safe_dump(doc, sort_keys=False, width=1000)
        parts.append(f"---\n# Source: {path}\n{body}")
    return "".join(parts)


def lint(values: Mapping[str, Any] | None = None, namespace: str = names.NAMESPACE) -> list[str]:
    """Helm's lint findings of severity error (or worse), as text."""
    report = helm.lint(CHART, dict(values or {}), strict=False, namespace=namespace)
    errors = [f"{m['path']}: {m['error']}" for m in report.get("messages", []) if m.get("severity", 0) >= 3]
    return errors + [str(e) for e in report.get("errors") or []]


def validate(objects: Iterable[Obj], version: str = KUBE_VERSION) -> list[str]:
    """What the Kubernetes JSON schemas (strict: no unknown fields) refuse, one line per object.
    Kinds without a schema (cert-manager's, the Prometheus Operator's) are skipped."""
    problems = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            continue
        except kubernetes_validate.ValidationError as err:
            where = ".".join(str(p) for p in err.path)
            problems.append(f"{obj['kind']}/{obj['metadata'].get('name')}: {where}: {err.message}")
    return problems


def find(objects: Iterable[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    if len(found) != 1:
        raise LookupError(f"expected one {kind}/{name}, found {len(found)}")
    return found[0]


def tuned(objects: list[Obj]) -> dict[str, Any]:
    """What the rendered chart carries for each values key ``hami-tune --output values`` writes, read
    the way the daemons read it: the device ConfigMap through the device plugin's and the scheduler's
    parsers, the extender's arguments through its own argument parser."""
    def container(kind: str, workload: str, name: str) -> Obj:
        spec = find(objects, kind, workload)["spec"]["template"]["spec"]
        (found,) = [c for c in spec["containers"] if c["name"] == name]
        return dict(found)

    device_yaml = find(objects, "ConfigMap", names.DEVICE_CONFIGMAP)["data"][names.DEVICE_CONFIG_KEY]
    plugin = apply_device_yaml(PluginConfig(), device_yaml)
    extender = container("Deployment", names.SCHEDULER_DEPLOYMENT, names.EXTENDER_CONTAINER)
    args = [str(a) for a in extender["args"]]
    parsed = scheduler_main.build_parser().parse_args(args)
    monitor = container("DaemonSet", names.MONITOR_DAEMONSET, names.MONITOR_CONTAINER)
    return {
        "devicePlugin.deviceSplitCount": plugin.device_split_count,
        "devicePlugin.deviceMemoryScaling": plugin.device_memory_scaling,
        "devices.nvidia.libCudaLogLevel": plugin.lib_cuda_log_level,
        "devices.nvidia.gpuCorePolicy": load_nvidia_config(yaml.safe_load(device_yaml)).gpu_core_policy,
        "devicePlugin.monitor.extraArgs": [str(a) for a in monitor.get("args", [])],
        "scheduler.nodeLockExpire": parsed.node_lock_timeout.total_seconds(),
        "scheduler.extender.extraArgs": args,
        "scheduler.extender.kube_client": (
            parsed.kube_qps, parsed.kube_burst, parsed.kube_timeout.total_seconds()
        ),
        "scheduler.extender.resources": extender.get("resources", {}),
    }


def _leaves(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def unlanded(objects: list[Obj], values: Mapping[str, Any]) -> list[str]:
    """One line per key of a ``hami-tune --output values`` file that the rendered objects do not carry
    (empty: every value landed)."""
    got = tuned(objects)
    resources = "scheduler.extender.resources."
    problems = []
    for path, value in _leaves(values).items():
        want = value
        if path.startswith(resources):
            kind, _, resource = path.removeprefix(resources).partition(".")
            have = got["scheduler.extender.resources"].get(kind, {}).get(resource)
        elif path == "scheduler.nodeLockExpire":
            want, have = parse_duration(str(value)).total_seconds(), got[path]
        elif path in ("scheduler.extender.extraArgs", "devicePlugin.monitor.extraArgs"):
            have = got[path][-len(value) :]  # the chart puts a list after its own arguments
        elif path == "devices.nvidia.libCudaLogLevel":
            want, have = str(value), got[path]  # an environment variable's value
        else:
            have = got.get(path, "<not a key hami-tune writes>")
        if have != want:
            problems.append(f"{path}: the values file says {want!r}, the rendered chart carries {have!r}")
    return problems
