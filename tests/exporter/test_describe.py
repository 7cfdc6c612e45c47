"""The monitor's metric descriptors match what a live monitor serves; the daemon serves its
API-client metrics on the registry it exposes."""

import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from hami.exporter import collector
from hami.exporter.config import load_config
from hami.exporter.main import Monitor, run
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.simnode import SimNode
from hami.testing.wait import wait_until

STANDARD = ("process_", "python_")
MIG_ONLY = {"hami_mig_device_info", "MigInfo"}  # served only on a node with MIG allocations


def exposed_names(registry: CollectorRegistry, rendered: bytes) -> set[str]:
    """Family names as /metrics exposes them: the registry's families plus the monitor's own
    rendered text (counters with _total, info with _info), standard collectors left out."""
    suffix = {"counter": "_total", "info": "_info"}
    families = [*registry.collect(), *text_string_to_metric_families(rendered.decode())]
    return {m.name + suffix.get(m.type, "") for m in families if not m.name.startswith(STANDARD)}


@pytest.mark.parametrize("legacy", [False, True])
def test_describe_matches_a_running_monitor(tmp_path: Path, legacy: bool) -> None:
    node = SimNode(str(tmp_path / "hook"), gpus=2, containers=2)
    argv = ["--metrics-bind-address", "127.0.0.1:0", "--pod-labels-allowlist", "app"]
    cfg = load_config(
        [*argv, "--legacy-metrics"] if legacy else argv,
        {"HOOK_PATH": node.hook_path, "NODE_NAME": "sim-node"},
    )
    registry = CollectorRegistry()
    collector.kube_metrics(registry)  # run() puts the API client's metrics on the same registry
    collector.listener_metrics(registry)  # and start() its listener's
    node.start(0.2)
    mon = Monitor(cfg, node.nvml, node.pods, lambda: {c.pod_uid for c in node.containers}, registry=registry)
    try:
        mon.feedback.tick()
        described = {d.name for d in collector.describe(legacy)}
        body = b"".join(mon.collector.render(openmetrics=False))
        assert exposed_names(registry, body) == described - MIG_ONLY
        assert MIG_ONLY & described == (MIG_ONLY if legacy else {"hami_mig_device_info"})
    finally:
        mon.lister.close()
        node.stop()


def test_describe_labels_and_legacy_split() -> None:
    plain = {d.name: d for d in collector.describe(False)}
    legacy = {d.name: d for d in collector.describe(True)}
    assert set(plain) < set(legacy)
    assert "HostGPUMemoryUsage" in set(legacy) - set(plain)
    assert plain["hami_host_gpu_ecc_errors_total"].labels[-1] == "error_type"
    assert plain["hami_monitor_collect_duration_seconds"].type == "histogram"
    assert plain["hami_vgpu_core_used_percent"].labels == (
        "namespace",
        "pod",
        "container",
        "vdevice_index",
        "device_uuid",
        "node",
        "zone",
    )


def test_run_serves_api_client_metrics(
    kube_api: KubeAPIServer, kube_config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "nvml.yaml"
    spec.write_text(
        "devices:\n  - {uuid: GPU-0, name: Tesla V100-PCIE-32GB, memory_mib: 32768}\n", encoding="utf-8"
    )
    monkeypatch.setenv("HAMI_NVML", "fake")
    monkeypatch.setenv("HAMI_FAKE_NVML_SPEC", str(spec))
    cfg = load_config(
        ["--metrics-bind-address", "127.0.0.1:0", "--kubeconfig", str(kube_config_file)],
        {"HOOK_PATH": str(tmp_path / "hook"), "NODE_NAME": "n1"},
    )
    registry = CollectorRegistry()
    stop = threading.Event()
    exits: list[int] = []
    thread = threading.Thread(target=lambda: exits.append(run(cfg, stop, registry)), daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: registry.get_sample_value("hami_kube_informer_synced", {"resource": "pods"}) == 1.0,
            30,
            "the pod informer synced",
        )
        host = kube_api.url.split("://", 1)[1]
        assert (
            registry.get_sample_value(
                "rest_client_requests_total", {"code": "200", "method": "GET", "host": host}
            )
            or 0
        ) >= 1
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive() and exits == [0]
