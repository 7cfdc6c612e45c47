"""The pure parts of the demo stack: config rendering (checked by promtool), dashboard interpolation,
the kube-state-metrics stand-in's families, the simulated cluster's objects, port checks."""

from __future__ import annotations

import socket
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from dashboards import generate

from hami.core import annotations as ann
from hami.core.codec.handshake import REQUESTING, parse_handshake
from hami.core.codec.node_devices import decode_node_devices
from hami.core.codec.nodelock import parse_node_lock
from hami.core.codec.pod_devices import decode_pod_devices
from hami.demo import alertsink, ksm, kubesched, promconfig
from hami.demo import main as demo
from hami.demo.monitoring import ALERTMANAGER_CONFIG, DASHBOARDS, RULES
from hami.testing import chart, cluster, dashqueries, processes
from hami.testing.processes import port_problem
from hami.testing.prometheus import PROMTOOL

AMTOOL = "/usr/bin/amtool"

needs_promtool = pytest.mark.skipif(not Path(PROMTOOL).exists(), reason="promtool is not installed")
NOW = datetime(2026, 1, 2, 3, 4, 5).astimezone()


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False)


@needs_promtool
def test_fast_rules_scale_every_for_and_group_interval_and_keep_everything_else(tmp_path: Path) -> None:
    original = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    fast_text = promconfig.fast_rules(RULES.read_text(encoding="utf-8"))
    fast = yaml.safe_load(fast_text)
    pairs = [(a, b) for g, h in zip(original["groups"], fast["groups"], strict=True)
             for a, b in zip(g["rules"], h["rules"], strict=True)]  # fmt: skip
    scaled = {a["alert"]: (a["for"], b["for"]) for a, b in pairs if "alert" in a}
    assert scaled["HAMiGPUPodPending"] == ("10m", "10000ms") and scaled["HAMiGPUXidErrors"] == ("0m", "0ms")
    assert all(promconfig.seconds(new) * 60 == promconfig.seconds(old) for old, new in scaled.values())
    assert all(
        {k: v for k, v in a.items() if k != "for"} == {k: v for k, v in b.items() if k != "for"}
        for a, b in pairs
    )
    groups = zip(original["groups"], fast["groups"], strict=True)
    intervals = {g["name"]: (g["interval"], h["interval"]) for g, h in groups if "interval" in g}
    assert intervals["hami-fragmentation.rules"] == ("5m", "5000ms")
    assert all(promconfig.seconds(new) * 60 == promconfig.seconds(old) for old, new in intervals.values())
    assert [g["name"] for g in fast["groups"] if "interval" in g] == list(intervals)
    path = tmp_path / "fast.yaml"
    path.write_text(fast_text, encoding="utf-8")
    out = _promtool("check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_prometheus_config_is_valid_for_promtool(tmp_path: Path) -> None:
    text = promconfig.prometheus_config(
        {
            promconfig.JOB_MONITOR: ["127.0.0.1:9394", "127.0.0.1:9494"],
            promconfig.JOB_KSM: ["127.0.0.1:8080"],
        },
        [RULES],
        "127.0.0.1:9093",
        "1s",
        "1s",
    )
    cfg = yaml.safe_load(text)
    assert [s["job_name"] for s in cfg["scrape_configs"]] == ["hami-monitor", "kube-state-metrics"]
    # sim-node's monitor and driver-node's: one job, two targets
    assert cfg["scrape_configs"][0]["static_configs"] == [{"targets": ["127.0.0.1:9394", "127.0.0.1:9494"]}]
    assert cfg["global"]["scrape_timeout"] == "1s"
    path = tmp_path / "prometheus.yml"
    path.write_text(text, encoding="utf-8")
    out = _promtool("check", "config", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_seconds_reads_prometheus_durations() -> None:
    assert promconfig.seconds("1h30m") == 5400 and promconfig.seconds("250ms") == 0.25
    with pytest.raises(ValueError, match="want a Prometheus duration"):
        promconfig.seconds("5 minutes")


def test_demo_alertmanager_keeps_the_shipped_inhibitions_and_sends_to_the_sink(tmp_path: Path) -> None:
    shipped = ALERTMANAGER_CONFIG.read_text(encoding="utf-8")
    text = promconfig.alertmanager_config(shipped, "http://127.0.0.1:1234/", group_wait="1s")
    cfg = yaml.safe_load(text)
    assert cfg["inhibit_rules"] == yaml.safe_load(shipped)["inhibit_rules"]
    assert cfg["route"]["group_wait"] == "1s"
    assert cfg["receivers"] == [
        {"name": "hami", "webhook_configs": [{"url": "http://127.0.0.1:1234/", "send_resolved": True}]}
    ]
    path = tmp_path / "am.yml"
    path.write_text(text, encoding="utf-8")
    out = subprocess.run(
        [AMTOOL, "check-config", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_alert_sink_writes_one_line_per_alert() -> None:
    note = {
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "HAMiGPUXidErrors", "severity": "warning", "node": "n1", "job": "x"},
                "annotations": {"description": "Device GPU-a reported 2 XID errors in the last 10m."},
            }
        ]
    }
    (line,) = alertsink.lines(note, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert line == (
        "2026-01-02T03:04:05Z firing HAMiGPUXidErrors [warning] node=n1 — "
        "Device GPU-a reported 2 XID errors in the last 10m."
    )


def test_substitute_interpolates_like_grafana() -> None:
    expr = 'rate(x{node=~"$node", job=~"${job}"}[$__rate_interval])'
    got = dashqueries.substitute(expr, {"node": ["a-1", "b.2"], "job": ["hami-scheduler"]}, "15s")
    assert got == 'rate(x{node=~"(a\\\\-1|b\\\\.2)", job=~"(hami\\\\-scheduler)"}[15s])'
    got = dashqueries.substitute("sum_over_time(x[$__range:60s])", {}, "15s", "6h")
    assert got == "sum_over_time(x[6h:60s])"
    with pytest.raises(ValueError, match="unresolved"):
        dashqueries.substitute('x{ns=~"$namespace"}', {"node": ["a"]}, "15s")


def test_every_dashboard_variable_is_a_supported_label_values_query() -> None:
    files = dashqueries.dashboard_files(DASHBOARDS)
    assert len(files) == len(generate.BOARDS)
    for path in files:
        variables = dashqueries.variable_queries(path)
        assert "node" in variables
        assert dashqueries.panel_queries(path)


def test_ksm_families_follow_kube_state_metrics_names() -> None:
    pods = [cluster.pending_pod(), cluster.gpu_pod(cluster.POD_SPECS[0])]
    pods[0]["metadata"]["uid"] = "u0"
    pods[1]["metadata"]["uid"] = "u1"
    phase, requests = ksm.pod_families(pods)
    pending = {(s.labels["pod"], s.labels["phase"]): s.value for s in phase.samples}
    assert pending[(cluster.PENDING, "Pending")] == 1.0 and pending[(cluster.PENDING, "Running")] == 0.0
    assert pending[(cluster.POD_SPECS[0].name, "Running")] == 1.0
    req = {(s.labels["pod"], s.labels["resource"]): s.value for s in requests.samples}
    assert req[(cluster.PENDING, "nvidia_com_gpu")] == 1.0
    assert req[(cluster.PENDING, "nvidia_com_gpumem")] == cluster.GPU_MEM_MIB * 4
    node = cluster.gpu_node("n", 0, 1, "Reported_2026-01-02 03:04:05", "a100")
    labels, allocatable = ksm.node_families([node])
    (sample,) = labels.samples
    assert sample.labels["node"] == "n" and sample.labels["label_hami_io_pool"] == "a100"
    free = {(s.labels["resource"], s.labels["unit"]): s.value for s in allocatable.samples}
    assert free[("nvidia_com_gpu", "integer")] == cluster.SPLIT_COUNT


def test_cluster_objects_carry_the_scenarios() -> None:
    objs = cluster.objects(4, NOW, scenarios=True)
    nodes = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Node"}
    assert set(nodes) == {
        cluster.NODE, cluster.STALE_NODE, cluster.LOCKED_NODE, cluster.FRAG_NODE, cluster.DRIVER_NODE
    }
    # driver-node's cards register the driver's enforcement, sim-node's HAMi-core's (the key left out)
    driver = decode_node_devices(nodes[cluster.DRIVER_NODE]["metadata"]["annotations"][ann.NODE_REGISTER])
    assert [d.enforcement for d in driver] == ["driver"] * cluster.DRIVER_GPUS
    assert [d.id for d in driver] == [d["uuid"] for d in cluster.fake_nvml_spec(1, node_index=4)["devices"]]
    devs = decode_node_devices(nodes[cluster.NODE]["metadata"]["annotations"][ann.NODE_REGISTER])
    assert [d.id for d in devs] == [d["uuid"] for d in cluster.fake_nvml_spec(4)["devices"]]
    # deviceMemoryScaling 1.5: the registered memory is 1.5 times the physical card
    assert {d.devmem for d in devs} == {cluster.GPU_MEM_MIB * 3 // 2}
    stale = parse_handshake(nodes[cluster.STALE_NODE]["metadata"]["annotations"][ann.NODE_HANDSHAKE])
    assert stale.state == REQUESTING and NOW - stale.time >= timedelta(minutes=20)
    lock = parse_node_lock(nodes[cluster.LOCKED_NODE]["metadata"]["annotations"][ann.NODE_LOCK])
    assert NOW - lock.time >= timedelta(minutes=10)
    pods = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Pod"}
    assert kubesched.pending_pods(list(pods.values()), cluster.SCHEDULER_NAME) == [
        pods[cluster.PENDING],
        pods[cluster.PINNED],
        pods[cluster.DRIVER_LIMITED.name],
        pods[cluster.FRAG_PENDING],
    ]
    # the driver-limited pod asks the scheduler for a driver-enforced card; its env comes from Allocate
    limited = pods[cluster.DRIVER_LIMITED.name]
    assert limited["metadata"]["annotations"] == {ann.POD_MEMORY_ENFORCEMENT: "driver"}
    assert "env" not in limited["spec"]["containers"][0]
    plain = cluster.objects(4, NOW, scenarios=False)
    assert [o["metadata"]["name"] for o in plain if o["kind"] == "Node"] == [cluster.NODE]
    sim = decode_node_devices(plain[0]["metadata"]["annotations"][ann.NODE_REGISTER])
    assert {d.devmem for d in sim} == {cluster.GPU_MEM_MIB}


def _allocated(objs: list[dict[str, Any]], node: str) -> dict[str, int]:
    """MiB allocated per card of ``node`` by its running pods."""
    out: dict[str, int] = {}
    for o in objs:
        if o["kind"] == "Pod" and o["spec"].get("nodeName") == node:
            for devs in decode_pod_devices(o["metadata"]["annotations"][ann.POD_DEVICES_ALLOCATED]):
                for d in devs:
                    out[d.uuid] = out.get(d.uuid, 0) + d.usedmem
    return out


def test_the_over_committed_card_and_the_fragmented_node_add_up() -> None:
    objs = cluster.objects(4, NOW, scenarios=True)
    sim = _allocated(objs, cluster.NODE)
    card = cluster.gpu_uuid(0, cluster.OVERCOMMIT_GPU)
    # the leaking trainer's card: limits above the physical card, within the scaled registration
    assert cluster.GPU_MEM_MIB < sim[card] <= cluster.GPU_MEM_MIB * cluster.MEMORY_SCALING
    free = [cluster.FRAG_GPU_MEM_MIB - used for used in _allocated(objs, cluster.FRAG_NODE).values()]
    assert len(free) == cluster.FRAG_GPUS
    # the pending L4 request fits the node's free memory, on none of its cards
    assert max(free) < cluster.FRAG_REQUEST_MIB <= sum(free)


def test_port_problem_names_a_taken_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert port_problem("127.0.0.1", port) == f"port {port} on 127.0.0.1 is already in use"
    assert port_problem("127.0.0.1", port) is None


def test_demo_fails_with_one_clear_line_when_a_port_is_taken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code = demo.main(["--workdir", str(tmp_path / "demo"), "--prometheus-port", str(port),
                          "--alertmanager-port", "0", "--monitor-port", "0", "--scheduler-port", "0",
                          "--deviceplugin-port", "0"])  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err.strip()
    want = f"demo: port {port} on 127.0.0.1 is already in use"
    assert err == f"{want} (needed for prometheus; choose another with --prometheus-port)"


def test_demo_clears_only_its_own_workdir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me", encoding="utf-8")
    assert demo.main(["--workdir", str(precious)]) == 1
    assert "is not a demo directory" in capsys.readouterr().err
    assert (precious / "notes.txt").read_text(encoding="utf-8") == "keep me"
    run = tmp_path / "run"
    assert demo.reset_workdir(run) is None
    (run / "old.log").write_text("previous run", encoding="utf-8")
    assert demo.reset_workdir(run) is None
    assert sorted(p.name for p in run.iterdir()) == [demo.MARKER]


def test_demo_prints_the_helm_lines_for_a_real_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--helm"]) == 0
    out = capsys.readouterr().out
    install_line = "helm install hami charts/hami -n kube-system -f charts/hami/examples/production.yaml"
    assert install_line in out and "helm template hami charts/hami" in out
    # the paths it names exist in the checkout, and the values file renders
    for word in install_line.split():
        if "/" in word:
            assert (chart.ROOT / word).exists(), word
    assert chart.render([chart.ROOT / "charts/hami/examples/production.yaml"])


def test_free_ports_come_from_below_the_ephemeral_range_and_never_repeat() -> None:
    # An ephemeral port can be taken by any outbound connection between our pick and the
    # child's bind (CI: "Address already in use"); ports below that range cannot.
    ephemeral_low = int(processes.EPHEMERAL_RANGE.read_text(encoding="utf-8").split()[0])
    picked = [processes.free_port() for _ in range(50)]
    assert len(set(picked)) == len(picked)
    assert all(processes.LOWEST_PICKED_PORT <= p < ephemeral_low for p in picked)
    assert all(port_problem("127.0.0.1", p) is None for p in picked)


def test_free_port_never_hands_out_a_port_something_listens_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        monkeypatch.setattr(processes, "_pick_range", lambda: range(taken, taken + 1))
        with pytest.raises(processes.StartError, match=f"no free port on 127.0.0.1 in {taken}-{taken}"):
            processes.free_port()
