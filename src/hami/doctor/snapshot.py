"""``hami-doctor snapshot``: write a scheduling snapshot for ``hami-tune simulate``.

From the API server (the default): nodes, GPU pods and ResourceQuotas as listed now. The
scheduler's policies and node-lock expiry come from the flags, else from the scheduler pods'
command lines (else its Deployment's), else HAMi's defaults; the device config and memory scaling
from ``--device-config`` / ``--device-memory-scaling``, else the cluster's ConfigMaps
(``hami.doctor.clusterconfig``), else 1.0. Every such fallback is written into the snapshot's
``notes`` and printed, so a report never hides an assumption.

With ``--from-prometheus URL`` the snapshot is assembled from metric history instead
(``hami.doctor.promhistory``): that history still has the pods the API has forgotten. With
``--kubeconfig`` too, the configuration is read from the cluster as above.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import yaml

from hami.core import names
from hami.core.duration import (
    DurationError,
    duration_flag,
    parse_duration,
    parse_prometheus_duration,
    prometheus_duration_flag,
)
from hami.core.kube import errors, raw
from hami.core.promapi import PrometheusClient
from hami.core.snapshot import model as snap
from hami.core.snapshot import writer as snapwrite
from hami.doctor import clusterconfig, fetch
from hami.doctor.capture import (
    NOTE_GPU_POLICY,
    NOTE_LOCK,
    NOTE_NODE_POLICY,
    NOTE_SCALING,
    SCHEDULER_CONFIG_KEYS,
    CaptureSettings,
    capture,
    scheduler_flags,
)
from hami.doctor.promhistory import HistorySettings, from_prometheus, scrape_interval

DEFAULTS = snap.Scheduler()
NOTE_EVENTS = "events"


class SnapshotUsageError(ValueError):
    """A flag or file the snapshot needs is wrong; the text says which and how."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="where to write the snapshot ('-': stdout)"
    )
    p.add_argument(
        "--node-scheduler-policy",
        choices=("binpack", "spread"),
        default=None,
        help="the scheduler's --node-scheduler-policy (default: read from its pods, else binpack)",
    )
    p.add_argument(
        "--gpu-scheduler-policy",
        default=None,
        help="the scheduler's --gpu-scheduler-policy (default: read from its pods, else spread)",
    )
    p.add_argument(
        "--device-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="HAMi's device config YAML (its nvidia: section: resource names, defaults, "
        "deviceMemoryScaling, deviceCoreScaling)",
    )
    p.add_argument(
        "--device-memory-scaling",
        action="append",
        default=[],
        metavar="[NODE=]FACTOR",
        help="deviceMemoryScaling the nodes registered with (repeat NODE=FACTOR per node)",
    )
    p.add_argument(
        "--from-prometheus",
        default=None,
        metavar="URL",
        help="assemble the snapshot from Prometheus history instead of the API server",
    )
    p.add_argument(
        "--since",
        type=prometheus_duration_flag,
        default="24h",
        help="with --from-prometheus: how much history, a Prometheus duration (default 24h)",
    )
    p.add_argument(
        "--step",
        type=duration_flag(),
        default=None,
        help="with --from-prometheus: time resolution of the history, at least the scrape interval "
        "(default: the extender's scrape interval plus a second, or since/2000 if longer)",
    )
    p.add_argument(
        "--query-timeout",
        type=duration_flag(bare_seconds=True),
        default=timedelta(seconds=60),
        help="with --from-prometheus: time limit of each query (default 60s)",
    )


def _scaling(values: list[str]) -> tuple[float | None, dict[str, float]]:
    default: float | None = None
    per_node: dict[str, float] = {}
    for text in values:
        node, sep, number = text.rpartition("=")
        try:
            factor = float(number)
        except ValueError:
            factor = -1.0
        if not factor > 0:
            raise SnapshotUsageError(
                f"--device-memory-scaling {text!r}: want FACTOR or NODE=FACTOR, FACTOR > 0"
            )
        if sep:
            per_node[node] = factor
        else:
            default = factor
    return default, per_node


def _device_config(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SnapshotUsageError(f"--device-config {path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise SnapshotUsageError(f"--device-config {path}: not YAML: {str(exc).splitlines()[0]}") from None
    section = doc.get("nvidia") if isinstance(doc, Mapping) else None
    if not isinstance(section, Mapping):
        raise SnapshotUsageError(f"--device-config {path}: no 'nvidia:' section (HAMi's device config)")
    return dict(section)


def _number(config: Mapping[str, Any], key: str) -> float | None:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


def settings(args: argparse.Namespace, cluster: clusterconfig.ClusterConfig | None) -> CaptureSettings:
    """What the snapshot records about the configuration, and the notes on where each part came from:
    the flags, else what the cluster holds (``cluster``: None without an API server), else defaults."""
    notes: dict[str, str] = {}
    found = scheduler_flags(cluster.scheduler_pods if cluster is not None else [])
    config = _device_config(args.device_config)
    if args.device_config is None and cluster is not None and cluster.device_config is not None:
        config = dict(cluster.device_config)

    def pick(flag: str, given: str | None, default: str, topic: str) -> str:
        if given is not None:
            return given
        if flag in found:
            return found[flag]
        notes[topic] = f"{flag} not given nor found in the scheduler's arguments: HAMi's default {default}"
        return default

    node_policy = pick(
        "--node-scheduler-policy", args.node_scheduler_policy, DEFAULTS.node_policy, NOTE_NODE_POLICY
    )
    gpu_policy = pick(
        "--gpu-scheduler-policy", args.gpu_scheduler_policy, DEFAULTS.gpu_policy, NOTE_GPU_POLICY
    )
    lock_text = found.get("--node-lock-timeout")
    lock = args.node_lock_timeout.total_seconds() if args.node_lock_timeout is not None else None
    if lock is None and lock_text is not None:
        try:
            lock = parse_duration(lock_text, bare_seconds=True).total_seconds()
        except DurationError:
            lock = None
    if lock is None:
        notes[NOTE_LOCK] = (
            "--node-lock-timeout not given nor found in the scheduler's arguments: "
            f"HAMi's default {DEFAULTS.node_lock_expire:g}s"
        )
        lock = DEFAULTS.node_lock_expire
    default, per_node = _scaling(args.device_memory_scaling)
    if not args.device_memory_scaling and cluster is not None:
        per_node = dict(cluster.node_scaling)
    if default is None:
        default = _number(config, "deviceMemoryScaling")
    if default is None:
        default = 1.0
        if not per_node:
            notes[NOTE_SCALING] = (
                "deviceMemoryScaling not given (--device-config, --device-memory-scaling) nor found in "
                f"ConfigMap {names.DEVICE_CONFIGMAP}: assumed 1.0, so registered memory is taken as "
                "physical memory"
            )
    scheduler = snap.Scheduler(
        scheduler_name=args.scheduler_name,
        node_policy=node_policy,
        gpu_policy=gpu_policy,
        node_lock_expire=lock,
        device_config={k: config[k] for k in SCHEDULER_CONFIG_KEYS if k in config},
    )
    return CaptureSettings(
        scheduler=scheduler,
        memory_scaling=default,
        node_memory_scaling=per_node,
        core_scaling=_number(config, "deviceCoreScaling") or 1.0,
        handshake_tz=args.scheduler_tz,
        notes=notes,
    )


def pod_events(api: Any, notes: dict[str, str]) -> list[dict[str, Any]]:
    """The pods' events (the order of pods created in one second); none, with a note, when the
    API refuses them."""
    path = raw.resource_path("", "v1", "events")
    try:
        return fetch.list_all(api, path)
    except errors.ApiError as err:
        notes[NOTE_EVENTS] = (
            f"the pods' events could not be listed ({err}): the order of pods created in the same "
            "second is searched for"
        )
        return []


def from_api(api: Any, args: argparse.Namespace, now: datetime) -> snap.Snapshot:
    s = settings(args, clusterconfig.read(api, args.scheduler_namespace))
    nodes = fetch.list_nodes(api)
    pods = fetch.list_all(api, raw.resource_path("", "v1", "pods"))
    quotas = fetch.list_all(api, raw.resource_path("", "v1", "resourcequotas"))
    notes = dict(s.notes)
    events = pod_events(api, notes)
    return capture(nodes, pods, quotas, now, replace(s, notes=notes), events=events)


def from_history(args: argparse.Namespace, now: datetime, api: Any | None = None) -> snap.Snapshot:
    """From Prometheus; the configuration from the cluster too when ``api`` (--kubeconfig) is given."""
    since = parse_prometheus_duration(args.since).total_seconds()
    if since <= 0:
        raise SnapshotUsageError("--since: want a positive duration such as 24h, 90m")
    step = args.step.total_seconds() if args.step is not None else None
    if step is not None and step <= 0:
        raise SnapshotUsageError("--step: want a positive duration such as 30s, 1m")
    s = settings(args, clusterconfig.read(api, args.scheduler_namespace) if api is not None else None)
    live = None
    if api is not None:  # the pods still in the API: their true requests, annotations, first filter
        nodes = fetch.list_nodes(api)
        pods = fetch.list_all(api, raw.resource_path("", "v1", "pods"))
        notes = dict(s.notes)
        events = pod_events(api, notes)
        s = replace(s, notes=notes)
        live = {p.key: p for p in capture(nodes, pods, [], now, s, events=events).pods}
    # every instant query at the snapshot's end (--now), as the range queries are, not at the
    # clock's now: the history's start and its series would otherwise slide with the wall clock
    client = PrometheusClient(
        args.from_prometheus, timeout=args.query_timeout.total_seconds(), at=now.timestamp()
    )
    try:
        if step is None:
            # as fine as the samples go: a coarser step puts pods minutes apart in one instant
            step = max(scrape_interval(client, since, now.timestamp()) + 1, since / 2000)
        return from_prometheus(
            client, HistorySettings(end=now.timestamp(), since=since, step=step, capture=s), live
        )
    finally:
        client.close()


def write(snapshot: snap.Snapshot, output: str, stdout: IO[str]) -> None:
    text = snapwrite.dumps(snapshot)
    if output == "-":
        stdout.write(text)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SnapshotUsageError(f"cannot write {output}: {exc.strerror}") from None


def summary(snapshot: snap.Snapshot, output: str) -> str:
    placed = sum(1 for p in snapshot.pods if p.allocation is not None)
    gone = sum(1 for p in snapshot.pods if p.finished is not None)
    where = "stdout" if output == "-" else output
    span = timedelta(seconds=round(snapshot.taken - snapshot.start))
    lines = [
        f"snapshot: {len(snapshot.nodes)} nodes, {len(snapshot.pods)} GPU pods ({placed} placed, "
        f"{gone} finished), {len(snapshot.quotas)} quotas, {len(snapshot.locks)} held locks over {span} "
        f"-> {where}"
    ]
    lines += [f"note: {n}" for n in snapshot.notes]
    return "\n".join(lines) + "\n"


def now_or(args: argparse.Namespace) -> datetime:
    now: datetime | None = args.now
    return now if now is not None else datetime.now(UTC)


def run(args: argparse.Namespace, api: Any | None, stdout: IO[str] | None = None) -> int:
    """Write the snapshot; the caller maps exceptions to exit codes."""
    out = stdout or sys.stdout
    now = now_or(args)
    snapshot = from_history(args, now, api) if args.from_prometheus else from_api(api, args, now)
    write(snapshot, args.output, out)
    sys.stderr.write(summary(snapshot, args.output))
    return 0
