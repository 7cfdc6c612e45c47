"""``hami-tune --values`` and ``--output values``: the chart's values in force, and the recommendations
as a Helm values file for ``charts/hami`` holding only the keys they change, each under a comment
with its evidence (``helm upgrade hami charts/hami --reuse-values -f FILE``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from hami.tune import components, cores, tables
from hami.tune.recommend import Recommendation


class ValuesError(ValueError):
    """The values file cannot be read as the chart's values; the message names the key."""


def _get(doc: Mapping[str, Any], path: str) -> Any:
    node: Any = doc
    for part in path.split("."):
        if not isinstance(node, Mapping):
            raise ValuesError(f"{path}: {part!r} is inside a {type(node).__name__}, not a mapping")
        node = node.get(part)
        if node is None:
            return None
    return node


def parse(text: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise ValuesError(f"not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise ValuesError("the values file must be a YAML mapping")
    return doc


def _args(doc: Mapping[str, Any], path: str, default: Sequence[str]) -> tuple[str, ...]:
    value = _get(doc, path)
    if value is None:
        return tuple(default)
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise ValuesError(f"{path} must be a list of strings")
    return tuple(value)


def current(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The Settings fields that the values in force set (absent keys keep the chart's defaults)."""
    out: dict[str, Any] = {"values_source": "--values"}
    policy = _get(doc, "devices.nvidia.gpuCorePolicy")
    if policy is not None:
        if policy not in ("default", "force", "disable"):
            raise ValuesError(f"devices.nvidia.gpuCorePolicy is {policy!r}, not default, force or disable")
        out["core_policy"] = policy
    level = _get(doc, "devices.nvidia.libCudaLogLevel")
    if level is not None:
        if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= 4:
            raise ValuesError(f"devices.nvidia.libCudaLogLevel is {level!r}, not 0 to 4")
        out["log_level"] = level
    out["monitor_args"] = _args(doc, "devicePlugin.monitor.extraArgs", ())
    return out


def _client_args(rec: Recommendation, doc: Mapping[str, Any]) -> list[str]:
    """The extender's arguments with the recommended --kube-qps/--kube-burst (Helm replaces lists)."""
    kept = [
        a
        for a in _args(doc, "scheduler.extender.extraArgs", tables.CHART_EXTENDER_ARGS)
        if not a.startswith(("--kube-qps", "--kube-burst", "--kube-timeout"))
    ]
    d = rec.details
    return [
        *kept,
        f"--kube-qps={d['kube_qps']}",
        f"--kube-burst={d['kube_burst']}",
        f"--kube-timeout={d['kube_timeout']}",
    ]


# Recommendation -> (values path, value) pairs.
Setter = Callable[[Recommendation, Mapping[str, Any]], list[tuple[str, Any]]]
SETTERS: dict[str, Setter] = {
    "deviceMemoryScaling": lambda r, _: [("devicePlugin.deviceMemoryScaling", float(r.value or 0))],
    "deviceSplitCount": lambda r, _: [("devicePlugin.deviceSplitCount", int(r.value or 0))],
    "--kube-qps/--kube-burst": lambda r, doc: [("scheduler.extender.extraArgs", _client_args(r, doc))],
    "nodeLockExpire": lambda r, _: [("scheduler.nodeLockExpire", r.value)],
    cores.POLICY: lambda r, _: [(cores.POLICY, r.value)],
    components.LOG_LEVEL: lambda r, _: [(components.LOG_LEVEL, int(r.value or 0))],
    components.MONITOR_ARGS: lambda r, _: [(components.MONITOR_ARGS, (r.value or "").split())],
    components.RESOURCES: lambda r, _: [(f"{components.RESOURCES}.{k}", v) for k, v in r.details.items()],
}


def _comment(rec: Recommendation) -> list[str]:
    lines = [f"{rec.parameter}: {rec.current if rec.current is not None else 'unknown'} -> {rec.value}"]
    lines += [f"  {reason}" for reason in rec.reasons]
    lines += [
        f"  evidence: {e.query} = {'no data' if e.value is None else f'{e.value:.6g}'}"
        + (f" {{{e.label}}}" if e.label else "")
        for e in rec.evidence[:6]
    ]
    if len(rec.evidence) > 6:
        lines.append(f"  ... {len(rec.evidence) - 6} more in --output json")
    return lines


Path = tuple[str, ...]


def _emit(tree: dict[str, Any], notes: dict[Path, list[str]], at: Path, out: list[str]) -> None:
    pad = "  " * len(at)
    for key, node in tree.items():
        path = (*at, key)
        out.extend(f"{pad}# {line}" for line in notes.get(path, ()))
        if isinstance(node, dict):
            out.append(f"{pad}{key}:")
            _emit(node, notes, path, out)
        else:
            text = yaml.safe_dump(node, default_flow_style=True, width=1 << 16).strip()
            out.append(f"{pad}{key}: {text.removesuffix('...').strip()}")


def _common(paths: list[Path]) -> Path:
    first = paths[0]
    n = 0
    while n < len(first) and all(len(p) > n and p[n] == first[n] for p in paths):
        n += 1
    return first[: max(n, 1)]


def render(recs: list[Recommendation], doc: Mapping[str, Any]) -> str:
    """The values file: changed keys only, each under its evidence; the rest as comments."""
    tree: dict[str, Any] = {}
    notes: dict[Path, list[str]] = {}
    header = [
        "# hami-tune recommendations for charts/hami: only the keys they change.",
        "#   helm upgrade hami charts/hami --reuse-values -f THIS_FILE",
    ]
    for rec in recs:
        setter = SETTERS.get(rec.parameter)
        if rec.refused:
            start = f"; the guide's starting point without history: {rec.start}" if rec.start else ""
            header.append(
                f"# not set, no measured value: {rec.parameter} (missing {', '.join(rec.missing)}){start}"
            )
            continue
        if not rec.changed:
            continue
        if setter is None:
            header.append(f"# not a chart value: {rec.parameter} {rec.value}")
            header += [f"#   {reason}" for reason in rec.reasons]
            continue
        pairs = [(tuple(path.split(".")), value) for path, value in setter(rec, doc)]
        for path, value in pairs:
            node = tree
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = value
        # The evidence goes above the innermost key that holds all of the rule's values.
        notes[_common([p for p, _ in pairs])] = _comment(rec)
    if rec_nodes := [
        f"# per-node {k.removeprefix('node/')}: devicememoryscaling {v} in devicePlugin.nodeConfiguration"
        for rec in recs
        if rec.parameter == "deviceMemoryScaling" and not rec.refused
        for k, v in rec.details.items()
        if k.startswith("node/")
    ]:
        header += rec_nodes
    out = list(header)
    _emit(tree, notes, (), out)
    if not tree:
        out.append("{}")
    return "\n".join(out) + "\n"
