"""The product end to end: Debian's Prometheus scrapes the running monitor, scheduler extender and device
plugin on the simulated cluster (``hami.demo.stack``, the processes of ``make demo``) with the rules
loaded; its alerts reach Debian's Alertmanager. The cluster's API is the real control plane
(``make demo HAMI_CONTROL_PLANE=real``): etcd, kube-apiserver, and the real kube-scheduler calling the
extender with the chart's configuration.

Speed-ups, and only these: scrape and evaluation every 1 s; a test copy of alerts/hami-rules.yaml in
which every alert's ``for:`` and every group's own ``interval:`` is divided by 60, minutes becoming
seconds (``promconfig.fast_rules``; expressions and thresholds unchanged); XIDs every 5 s, a batch
pod every 5 s, and the over-commit scenario's container leaking 16 MiB/s instead of 4 (its card's trend
then dominates the other containers' jitter within the first two minutes of samples).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest
import requests
import yaml
from dashboards import generate

from hami.core import annotations as ann
from hami.core import thresholds
from hami.core.codec.nodelock import NodeLock, format_node_lock
from hami.demo import main as demo
from hami.demo import promconfig
from hami.demo.monitoring import ALERTMANAGER, DASHBOARDS, RULES
from hami.demo.options import DEVICE_PLUGIN, MONITOR, SCHEDULER, Ports, StackOptions, installed
from hami.demo.stack import Stack
from hami.doctor.findings import EXIT_BROKEN, EXIT_OK, EXIT_WARNING
from hami.doctor.main import main as doctor_main
from hami.testing import cluster, dashqueries, hamipeer
from hami.testing.controlplane import Binaries
from hami.testing.prometheus import PROMETHEUS, PROMTOOL
from hami.testing.wait import wait_until
from hami.tune.main import main as tune_main

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(Path(p).exists() for p in (PROMETHEUS, PROMTOOL, ALERTMANAGER)),
        reason="Debian prometheus packages missing",
    ),
]
T = TypeVar("T")
COMPONENTS = tuple(c for c in (MONITOR, SCHEDULER, DEVICE_PLUGIN) if installed(c))
WAIT_S = 120.0  # every bounded wait: generous for a loaded 2-core machine
LAST_GPU = cluster.gpu_uuid(0, 3)
HOT_GPU = cluster.gpu_uuid(0, 2)
OVERCOMMITTED_GPU = cluster.gpu_uuid(0, cluster.OVERCOMMIT_GPU)
CAPACITY_BOARD = DASHBOARDS / "hami-capacity.json"
LOCK_TIMEOUT = timedelta(minutes=30)  # the scheduler's --node-lock-timeout in this module

def poll(check: Callable[[], T | None], what: str, timeout: float = WAIT_S) -> T:
    return wait_until(check, timeout, what, interval=0.5)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, control_plane_binaries: Binaries) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("stack")
    rules = work / "hami-rules-fast.yaml"
    rules.write_text(promconfig.fast_rules(RULES.read_text(encoding="utf-8")), encoding="utf-8")
    opts = StackOptions(
        workdir=work / "run",
        ports=Ports(**dict.fromkeys(vars(Ports()), 0)),
        rules=rules,
        scrape_interval="1s",
        evaluation_interval="1s",
        xid_every=5.0,
        leak_rate=16.0,
        churn_every=5.0,
        schedule_every=1.0,
        components=COMPONENTS,
        # the lock the pinned pod takes over (its crashed owner is gone) holds locked-node for the
        # whole module, not only for the default 5m (the last test re-dates it to see it expire)
        node_lock_timeout=f"{int(LOCK_TIMEOUT.total_seconds() // 60)}m",
        control_plane="real",
    )
    s = Stack(opts)
    s.start()
    try:
        yield s
    finally:
        codes = s.stop()
        assert all(code == 0 for code in codes.values()), f"unclean exits: {codes}"


def prometheus(stack: Stack) -> dashqueries.Prometheus:
    return dashqueries.Prometheus(stack.url("prometheus"))


def need(*components: str) -> None:
    missing = [c for c in components if c not in COMPONENTS]
    if missing:
        pytest.skip(f"not in this checkout: {', '.join(missing)}")


def test_prometheus_scrapes_every_daemon(stack: Stack) -> None:
    def all_up() -> list[dict[str, Any]] | None:
        targets = requests.get(stack.url("prometheus") + "/api/v1/targets", timeout=10).json()["data"]
        active = targets["activeTargets"]
        return active if active and all(t["health"] == "up" for t in active) else None

    active = poll(all_up, "every scrape target up")
    expected = {addr: job for job, addrs in stack.metrics_targets().items() for addr in addrs}
    assert {t["labels"]["instance"]: t["labels"]["job"] for t in active} == expected


# HAMi v2.10's own name (docs/design/scheduler-extender.md §7.1): promtool's naming lint flags its `_count`
# suffix. Only this finding, on only this name, is accepted.
LINT_ACCEPTED = {
    'hami_gpu_shared_count non-histogram and non-summary metrics should not have "_count" suffix'
}
PROMTOOL_LINT_FOUND = 3  # exit status for lint findings (1 is a parse error)


@pytest.mark.parametrize("component", [MONITOR, SCHEDULER, DEVICE_PLUGIN])
def test_promtool_check_metrics_is_clean_on_a_live_scrape(stack: Stack, component: str) -> None:
    need(component)
    body = requests.get(stack.url(component) + "/metrics", timeout=10).text
    out = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=body, capture_output=True, text=True, timeout=60, check=False
    )
    findings = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert out.returncode in (0, PROMTOOL_LINT_FOUND), findings
    assert [f for f in findings if f not in LINT_ACCEPTED] == []


def _empty_queries(stack: Stack) -> dict[tuple[str, str], str]:
    results = dashqueries.run_all(prometheus(stack), DASHBOARDS, rate_interval="15s")
    return {(q.dashboard, q.panel): expr for q, (expr, n) in results.items() if n == 0}


def test_every_dashboard_panel_query_returns_data(stack: Stack) -> None:
    need(MONITOR, SCHEDULER, DEVICE_PLUGIN)
    assert len(dashqueries.dashboard_files(DASHBOARDS)) == len(generate.BOARDS)
    last: dict[tuple[str, str], str] = {}

    def settled() -> bool:
        nonlocal last
        last = _empty_queries(stack)
        return not last

    try:
        poll(settled, "every dashboard panel query to return data")
    except AssertionError:
        pytest.fail(
            "panels without data:\n" + "\n".join(f"  {d} / {p}: {e}" for (d, p), e in sorted(last.items()))
        )


def test_hamis_own_dashboard_shows_data_on_our_metrics(stack: Stack) -> None:
    """HAMi's dashboard (``$HAMI_SRC/dashboards``): every panel query, evaluated as Grafana would in
    the Prometheus that scrapes our daemons, returns data. Skipped only without HAMi's source."""
    src = hamipeer.source()
    if src is None:
        pytest.skip(hamipeer.ABSENT)
    need(MONITOR, SCHEDULER)
    last: dict[tuple[str, str], str] = {}

    def settled() -> bool:
        nonlocal last
        results = dashqueries.run_all(prometheus(stack), src / "dashboards", rate_interval="15s")
        last = {(q.dashboard, q.panel): expr for q, (expr, n) in results.items() if n == 0}
        return bool(results) and not last

    try:
        poll(settled, "every panel query of HAMi's dashboard to return data")
    except AssertionError:
        empty = "\n".join(f"  {d} / {p}: {e}" for (d, p), e in sorted(last.items()))
        pytest.fail(f"HAMi's panels without data:\n{empty}")


def _alert_fires(stack: Stack, name: str, labels: dict[str, str]) -> Callable[[], bool]:
    def check() -> bool:
        firing = [
            a
            for a in prometheus(stack).alerts()
            if a["labels"]["alertname"] == name and a["state"] == "firing"
        ]
        return any(all(a["labels"].get(k) == v for k, v in labels.items()) for a in firing)

    return check


def _alertmanager_has(stack: Stack, name: str, labels: dict[str, str]) -> Callable[[], bool]:
    """Received by Alertmanager: active, or suppressed by an inhibition of alerts/alertmanager.yaml."""

    def check() -> bool:
        got = requests.get(stack.url("alertmanager") + "/api/v2/alerts", timeout=10).json()
        return any(
            a["labels"].get("alertname") == name
            and a["status"]["state"] in ("active", "suppressed")
            and all(a["labels"].get(k) == v for k, v in labels.items())
            for a in got
        )

    return check


SCENARIOS = [
    # (scenario, daemons it needs, alert, labels the firing alert must carry)
    ("over-limit container", (MONITOR,), "HAMiGPUMemoryHigh", {"namespace": "scenarios", "pod": "overlimit"}),
    ("over-limit container", (MONITOR,), "HAMiMonitorRegionSkips", {"reason": "usage_over_limit"}),
    ("expired handshake", (SCHEDULER,), "HAMiNodeHandshakeExpired", {"node": cluster.STALE_NODE}),
    (
        "unhealthy device",
        (MONITOR,),
        "HAMiGPUDeviceUnhealthy",
        {"node": cluster.NODE, "device_uuid": LAST_GPU},
    ),
    ("unhealthy device", (MONITOR,), "HAMiGPUXidErrors", {"node": cluster.NODE, "device_uuid": LAST_GPU}),
    ("stuck node lock", (SCHEDULER,), "HAMiNodeLockHeldTooLong", {"node": cluster.LOCKED_NODE}),
    ("pending pod", (), "HAMiGPUPodPending", {"namespace": "scenarios", "pod": cluster.PENDING}),
    ("pending pod", (SCHEDULER,), "HAMiSchedulerPendingPods", {"reason": "CardInsufficientMemory"}),
    ("idle vGPU", (MONITOR,), "HAMiVGPUIdle", {"namespace": "notebooks", "pod": cluster.IDLE.name}),
    (
        "GPU not limited",
        (MONITOR,),
        "HAMiVGPUNotLimited",
        {"namespace": "scenarios", "pod": cluster.UNLIMITED.name, "reason": "control_disabled"},
    ),
    (
        "failed row remap",
        (MONITOR,),
        "HAMiGPUEccErrors",
        {"device_uuid": LAST_GPU, "problem": "a failed row remap"},
    ),
    ("thermal slowdown", (MONITOR,), "HAMiGPUTemperatureHigh", {"device_uuid": HOT_GPU}),
    (
        "shim under-reports",
        (MONITOR,),
        "HAMiVGPUShimUnderReports",
        {"namespace": "scenarios", "pod": cluster.SHIM_UNDERREPORTS.name},
    ),
    # The unlimited container's process holds memory on its card that no region accounts for.
    (
        "process outside HAMi",
        (MONITOR,),
        "HAMiAllocationInconsistent",
        {"node": cluster.NODE, "kind": "memory_outside_hami"},
    ),
    # sim-node registers its cards at deviceMemoryScaling 1.5; the leaking trainer's card runs out.
    (
        "over-committed card",
        (MONITOR,),
        "HAMiGPUOvercommitExhaustionRisk",
        {"node": cluster.NODE, "device_uuid": OVERCOMMITTED_GPU},
    ),
    ("fragmented node", (SCHEDULER,), "HAMiGPUFragmentationBlocksPods", {"node": cluster.FRAG_NODE}),
]


@pytest.mark.parametrize(
    ("scenario", "needs", "alert", "labels"), SCENARIOS, ids=[f"{s[0]}:{s[2]}" for s in SCENARIOS]
)
def test_scenario_fires_its_alert_and_alertmanager_receives_it(
    stack: Stack, scenario: str, needs: tuple[str, ...], alert: str, labels: dict[str, str]
) -> None:
    need(*needs)
    poll(_alert_fires(stack, alert, labels), f"{alert}{labels} firing in Prometheus ({scenario})")
    poll(_alertmanager_has(stack, alert, labels), f"{alert}{labels} active in Alertmanager ({scenario})")


def test_the_exhaustion_alert_names_the_pods_of_the_over_committed_card(stack: Stack) -> None:
    need(MONITOR)
    labels = {"device_uuid": OVERCOMMITTED_GPU}
    poll(_alert_fires(stack, "HAMiGPUOvercommitExhaustionRisk", labels), "the over-commit alert")
    alert = next(
        a
        for a in prometheus(stack).alerts()
        if a["labels"]["alertname"] == "HAMiGPUOvercommitExhaustionRisk"
        and a["labels"].get("device_uuid") == OVERCOMMITTED_GPU
    )
    pods = (*cluster.POD_SPECS, cluster.OVERLIMIT, cluster.LEAKY)
    on_card = [p for p in pods if p.gpu == cluster.OVERCOMMIT_GPU]
    assert len(on_card) == 4
    for p in on_card:
        assert f"{p.namespace}/{p.name}" in alert["annotations"]["description"]


def _capacity_panel(stack: Stack, title: str, board: Path = CAPACITY_BOARD) -> list[dict[str, Any]]:
    """The series of one panel of a dashboard (the capacity one by default), its variables at every
    value (Grafana's All)."""
    prom = prometheus(stack)
    variables = dashqueries.variable_queries(board)
    values = {name: prom.label_values(*mq) for name, mq in variables.items()}
    exprs = [q.expr for q in dashqueries.panel_queries(board) if q.panel == title]
    assert exprs, title
    return [s for e in exprs for s in prom.query(dashqueries.substitute(e, values, "15s"))]


def _card(series: list[dict[str, Any]], name: str) -> float | None:
    found = [
        float(s["value"][1])
        for s in series
        if s["metric"].get("__name__") == name and s["metric"].get("device_uuid") == OVERCOMMITTED_GPU
    ]
    return found[0] if found else None


def test_capacity_panels_show_the_over_committed_card(stack: Stack) -> None:
    """Claimable above headroom on the leaking trainer's card, and a time to exhaustion below the
    alert's horizon: what the over-commit row draws."""
    need(MONITOR)
    horizon = float(thresholds.load()["thresholds"]["overcommit_exhaustion_horizon_seconds"])

    def shown() -> bool:
        room = _capacity_panel(stack, "Physical headroom vs what the vGPUs may still claim")
        headroom = _card(room, "node_device:hami_host_gpu_memory_headroom_bytes:total_minus_used")
        claimable = _card(room, "node_device:hami_vgpu_memory_claimable_bytes:sum")
        eta = _card(
            _capacity_panel(stack, "Time to physical exhaustion at the last hour's growth"),
            "node_device:hami_host_gpu_memory_exhaustion_seconds:deriv1h",
        )
        if headroom is None or claimable is None or eta is None:
            return False
        return claimable > headroom and eta < horizon

    poll(shown, "the over-commit panels to show the over-committed card")


def test_capacity_panels_show_the_fragmented_node(stack: Stack) -> None:
    """None of fragmented-node's free memory can take the median request: its ratio, and its model's, is 1;
    sim-node's, beside it, is low."""
    need(SCHEDULER)

    def shown() -> bool:
        nodes = {
            s["metric"].get("node"): float(s["value"][1])
            for s in _capacity_panel(stack, "Fragmentation per node")
        }
        models = {
            s["metric"].get("device_type"): float(s["value"][1])
            for s in _capacity_panel(stack, "Fragmentation per GPU model")
        }
        fragmented = nodes.get(cluster.FRAG_NODE) == 1.0 and models.get(cluster.FRAG_GPU_TYPE) == 1.0
        # sim-node's free slices take a typical request: its ratio is low, not 1 for want of data
        return fragmented and nodes.get(cluster.NODE, 1.0) < 0.5

    poll(shown, "the fragmentation panels to show fragmented-node and its GPU model at 1")


def test_over_limit_container_fires_vgpu_memory_over_limit(stack: Stack) -> None:
    need(MONITOR)
    poll(
        _alert_fires(stack, "HAMiVGPUMemoryOverLimit", {"pod": "overlimit"}), "HAMiVGPUMemoryOverLimit", 20.0
    )


def test_device_plugin_sees_the_scheduled_xid_and_marks_the_gpu_unhealthy(stack: Stack) -> None:
    """The plugin's own fake NVML raises the XIDs its spec schedules (it lives in the plugin's process)."""
    need(DEVICE_PLUGIN)
    job = 'job="hami-device-plugin"'
    xids = f'hami_deviceplugin_health_events_total{{{job}, device_uuid="{LAST_GPU}", event="xid_critical"}}'
    poll(
        lambda: prometheus(stack).query(xids + " > 0"),
        "the device plugin to count the scheduled XID",
    )
    unhealthy = poll(
        lambda: prometheus(stack).query(f"hami_device_health{{{job}}} == 0"), "the plugin's unhealthy GPU"
    )
    assert {s["metric"]["device_uuid"] for s in unhealthy} == {LAST_GPU}


def test_broken_expired_lock_fires_node_lock_expired(stack: Stack) -> None:
    need(SCHEDULER)
    has_counter = "hami_scheduler_node_lock_expired_total"
    poll(lambda: prometheus(stack).query(has_counter), "the scheduler to break locked-node's expired lock")
    poll(_alert_fires(stack, "HAMiNodeLockExpired", {}), "HAMiNodeLockExpired", 20.0)


def test_healthy_things_do_not_alert(stack: Stack) -> None:
    """The scenarios' alerts name only the scenarios' objects."""
    need(MONITOR, SCHEDULER, DEVICE_PLUGIN)
    poll(_alert_fires(stack, "HAMiNodeHandshakeExpired", {"node": cluster.STALE_NODE}), "the handshake alert")
    poll(
        _alert_fires(stack, "HAMiGPUDeviceUnhealthy", {"device_uuid": LAST_GPU}), "the unhealthy-device alert"
    )
    poll(_alert_fires(stack, "HAMiGPUPodPending", {"pod": cluster.PENDING}), "the pending-pod alert")
    poll(_alert_fires(stack, "HAMiNodeLockHeldTooLong", {}), "the node-lock alert")
    poll(_alert_fires(stack, "HAMiGPUFragmentationBlocksPods", {}), "the fragmentation alert")
    poll(_alert_fires(stack, "HAMiGPUOvercommitExhaustionRisk", {}), "the over-commit alert")
    alerts = prometheus(stack).alerts()
    by_name: dict[str, list[dict[str, str]]] = {}
    for a in alerts:
        by_name.setdefault(a["labels"]["alertname"], []).append(a["labels"])
    # locked-node has no device plugin either: its handshake expires a minute after the scheduler asks
    assert cluster.STALE_NODE in {a.get("node") for a in by_name["HAMiNodeHandshakeExpired"]}
    # fragmented-node's handshake is answered by the stack, as its device plugin would
    expired = {a.get("node") for a in by_name["HAMiNodeHandshakeExpired"]}
    assert cluster.NODE not in expired and cluster.FRAG_NODE not in expired
    assert {a.get("node") for a in by_name["HAMiGPUFragmentationBlocksPods"]} == {cluster.FRAG_NODE}
    # Batch pods may over-commit another card of sim-node (1.5-scaled) for a while, and grow on it.
    risks = by_name["HAMiGPUOvercommitExhaustionRisk"]
    assert OVERCOMMITTED_GPU in {a.get("device_uuid") for a in risks}
    assert {a.get("node") for a in risks} == {cluster.NODE}
    assert {a.get("device_uuid") for a in by_name["HAMiGPUDeviceUnhealthy"]} == {LAST_GPU}
    running = {(p.namespace, p.name) for p in cluster.POD_SPECS}  # batch pods may be pending for a second
    pending = {(a.get("namespace"), a.get("pod")) for a in by_name["HAMiGPUPodPending"]}
    assert ("scenarios", cluster.PENDING) in pending and not pending & running
    assert not any(name.endswith("Down") for name in by_name), sorted(by_name)


def test_every_url_the_banner_prints_answers(stack: Stack) -> None:
    """Every address in the banner opens, the bare ones too: the tools' --scheduler-url and
    --prometheus-url (a daemon's landing page, Prometheus's UI) and the Kubernetes API (its paths)."""
    text = demo.banner(stack, [])
    urls = sorted({u.rstrip(",.") for u in re.findall(r"https?://[^\s)]+", text)})
    bare = [u for u in urls if urlsplit(u).path in ("", "/")]
    assert stack.kube_url in urls and stack.url(SCHEDULER) in bare, bare
    assert any("/alerts" in u for u in urls) and any(u.startswith(stack.url("alertmanager")) for u in urls)
    # a real kube-apiserver's addresses want kubectl's client certificate, as the banner's kubectl has
    real = stack.real.cp.session() if stack.real is not None else None
    for url in urls:
        api = real is not None and stack.real is not None and url.startswith(stack.real.cp.url)
        got = (real if api and real is not None else requests).get(url, timeout=10)
        assert got.status_code == 200, (url, got.status_code)
    for c in stack.running:  # every daemon's bare address is its landing page
        assert '<a href="/metrics">' in requests.get(stack.url(c), timeout=10).text, c
    assert requests.get(stack.kube_url, timeout=10).json()["paths"]
    assert str(stack.notifications) in text
    assert f"pod scenarios/{cluster.PENDING}" in text


def test_every_doctor_command_the_banner_prints_reads_the_demo(stack: Stack) -> None:
    """Run in-process with the printed arguments: a report each (0-2), never a usage or cluster error."""
    need(SCHEDULER)
    doctor = demo.tool("hami-doctor")
    lines = [line for line in demo.commands(stack) if line.startswith(doctor + " ")]
    assert len(lines) == 5, lines
    for line in lines:
        argv = shlex.split(line.removeprefix(doctor + " "))
        code = doctor_main([*argv, "--json"], stdout=io.StringIO())
        assert code in (EXIT_OK, EXIT_WARNING, EXIT_BROKEN), line


def test_notifications_reach_the_file_the_banner_names(stack: Stack) -> None:
    poll(
        lambda: "HAMiGPUXidErrors" in stack.notifications.read_text(encoding="utf-8")
        or "HAMiGPUDeviceUnhealthy" in stack.notifications.read_text(encoding="utf-8"),
        "a notification in the sink's file",
    )


NODE_ALERTS = ("HAMiNodeHandshakeExpired", "HAMiNodeLockHeldTooLong")


def test_no_node_alert_fires_for_a_node_the_scheduler_calls_schedulable(stack: Stack) -> None:
    need(SCHEDULER)
    poll(_alert_fires(stack, "HAMiNodeHandshakeExpired", {"node": cluster.STALE_NODE}), "the handshake alert")
    firing = prometheus(stack).query(f'ALERTS{{alertstate="firing", alertname=~"{"|".join(NODE_ALERTS)}"}}')
    schedulable = prometheus(stack).query("hami_scheduler_node_schedulable == 1")
    alerted = {a["metric"]["node"] for a in firing}
    assert alerted and not alerted & {s["metric"]["node"] for s in schedulable}
    assert cluster.NODE not in alerted


def _doctor(stack: Stack, *args: str, hook_path: Path | None = None) -> tuple[int, dict[str, Any]]:
    """``hami-doctor`` run on sim-node (or on the node whose ``hook_path`` is given): a pod's GPU-limit
    walk reads the node's files there."""
    out = io.StringIO()
    argv = [*args, "--kubeconfig", str(stack.kubeconfig), "--scheduler-url", stack.url(SCHEDULER), "--json"]
    if args[0] == "pod":
        argv += ["--hook-path", str(hook_path or stack.hook_path)]
    code = doctor_main(argv, stdout=out)
    return code, json.loads(out.getvalue())


def test_the_doctor_agrees_with_the_scheduler_and_the_alerts(stack: Stack) -> None:
    need(SCHEDULER)
    poll(
        _alert_fires(stack, "HAMiSchedulerPendingPods", {"reason": "CardInsufficientMemory"}),
        "the pending-pods alert with the scheduler's reason",
    )

    def views() -> tuple[dict[str, str], dict[str, str]]:
        metric = {
            s["metric"]["node"]: s["metric"]["reason"]
            for s in prometheus(stack).query("hami_scheduler_node_schedulable")
        }
        _, nodes = _doctor(stack, "nodes")
        verdicts = {
            s["title"].removeprefix("node "): f["evidence"][0].rsplit(": ", 1)[1]
            for s in nodes["sections"]
            for f in s["findings"]
            if f["code"] == "node.schedulable"
        }
        return verdicts, metric

    # The doctor reads the scheduler now, the metric is the last scrape: a bind's node lock taken or
    # released in between (the demo keeps binding pods) differs for one scrape interval.
    seen: list[tuple[dict[str, str], dict[str, str]]] = []

    def agree() -> bool:
        seen.append(views())
        return seen[-1][0] == seen[-1][1]

    try:
        poll(agree, "the doctor's node verdicts and hami_scheduler_node_schedulable to agree", timeout=60)
    except AssertionError:
        assert seen[-1][0] == seen[-1][1]
    code, pod = _doctor(stack, "pod", f"scenarios/{cluster.PENDING}")
    codes = [f["code"] for f in pod["sections"][0]["findings"]]
    assert code == 2 and "pod.decision.CardInsufficientMemory" in codes
    summary = next(f["summary"] for f in pod["sections"][0]["findings"] if f["severity"] == "broken")
    assert summary.startswith("CardInsufficientMemory: requests 160 GiB per card; the largest free")
    code, running = _doctor(stack, "pod", "ml-train/bert-train-0")
    assert code == 0 and running["sections"][0]["findings"][-1]["code"] == "pod.bind-phase.success"
    assert running["sections"][1]["findings"][-1]["code"] == "gpulimit.region.present"


def test_the_doctor_names_why_the_unlimited_container_is_not_limited(stack: Stack) -> None:
    need(MONITOR, SCHEDULER)
    poll(_alert_fires(stack, "HAMiVGPUNotLimited", {"pod": cluster.UNLIMITED.name}), "HAMiVGPUNotLimited")
    code, report = _doctor(stack, "pod", f"{cluster.UNLIMITED.namespace}/{cluster.UNLIMITED.name}")
    assert code == 1
    assert [f["code"] for f in report["sections"][1]["findings"]] == ["gpulimit.control-disabled"]


def test_alertmanager_inhibits_the_over_limit_containers_other_alerts(stack: Stack) -> None:
    need(MONITOR)
    poll(_alertmanager_has(stack, "HAMiVGPUMemoryOverLimit", {"pod": "overlimit"}), "the over-limit alert")

    def inhibited() -> bool:
        got = requests.get(stack.url("alertmanager") + "/api/v2/alerts", timeout=10).json()
        return any(
            a["labels"].get("alertname") == "HAMiGPUMemoryHigh"
            and a["labels"].get("pod") == "overlimit"
            and a["status"]["inhibitedBy"]
            for a in got
        )

    poll(inhibited, "HAMiGPUMemoryHigh of the over-limit container inhibited")


def _per_group(metric: str) -> re.Pattern[str]:
    return re.compile(rf'^{metric}\{{rule_group="[^;"]*;([^"]+)"\}} (\S+)$', re.M)


LAST_DURATION = _per_group("prometheus_rule_group_last_duration_seconds")
FAILURES = _per_group("prometheus_rule_evaluation_failures_total")


def test_every_rule_evaluates_without_error_and_reports_its_cost(
    stack: Stack, record_property: Callable[[str, object], None]
) -> None:
    """Every rule of every group evaluates on the live series (a join that meets duplicate series fails only
    here, not in promtool's fixtures); the groups' last durations are the figure the capacity issue budgets,
    recorded in the test report (timing is reported, not asserted)."""
    names = {g["name"] for g in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]}

    def all_evaluated() -> list[dict[str, Any]] | None:
        groups: list[dict[str, Any]] = requests.get(
            stack.url("prometheus") + "/api/v1/rules", timeout=10
        ).json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        done = {g["name"] for g in groups} == names and all(r["health"] != "unknown" for r in rules)
        return rules if done else None

    rules = poll(all_evaluated, "every rule group evaluated once")
    broken = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not broken, broken
    own = requests.get(stack.url("prometheus") + "/metrics", timeout=10).text
    assert {g for g, v in FAILURES.findall(own) if float(v) > 0} == set()
    durations = {g: float(v) for g, v in LAST_DURATION.findall(own)}
    assert set(durations) == names
    record_property("rule_group_last_duration_seconds_sum", round(sum(durations.values()), 6))


# Alerts a scenario raises beside the one SCENARIOS proves it by, with the scenario that explains each
# and the states it may be in.
ANY_STATE = ("pending", "firing")
SIDE_ALERTS = [
    ("over-limit container", "HAMiVGPUMemoryOverLimit", {"pod": "overlimit"}, ANY_STATE),
    # HAMi-core never loads in it: its allocation has no region, beside its memory outside HAMi.
    (
        "GPU not limited",
        "HAMiAllocationInconsistent",
        {"node": cluster.NODE, "kind": "allocation_without_region"},
        ANY_STATE,
    ),
    # locked-node has no device plugin: its handshake expires too, the crashed bind's lock is broken, and
    # the pinned pod, bound there, never runs (no kubelet)
    ("stuck node lock", "HAMiNodeHandshakeExpired", {"node": cluster.LOCKED_NODE}, ANY_STATE),
    ("stuck node lock", "HAMiNodeLockExpired", {}, ANY_STATE),
    ("stuck node lock", "HAMiGPUPodPending", {"pod": cluster.PINNED}, ANY_STATE),
    ("stuck node lock", "HAMiSchedulerPendingPods", {"reason": "Bound"}, ANY_STATE),
    # Batch pods may over-commit another card of sim-node (1.5-scaled) for a while, and grow on it.
    ("over-committed card", "HAMiGPUOvercommitExhaustionRisk", {"node": cluster.NODE}, ANY_STATE),
    ("fragmented node", "HAMiGPUPodPending", {"pod": cluster.FRAG_PENDING}, ANY_STATE),
    ("fragmented node", "HAMiGPUMemoryAllocationHigh", {"node": cluster.FRAG_NODE}, ANY_STATE),
    # HAMi's proposed contract names (alerts/contract.py) for what ours above say; Alertmanager inhibits
    # one of each pair (docs/runbooks/README.md), Prometheus evaluates both
    ("fragmented node", "HAMiGPUMemoryNearlyExhausted", {"node": cluster.FRAG_NODE}, ANY_STATE),
    ("over-limit container", "HAMivGPUMemoryNearLimit", {"pod": "overlimit"}, ANY_STATE),
    # sim-node's card 1 carries the idle and unlimited scenario pods beside two workloads: 90 % of its
    # cores are allocated
    (
        "unlimited container",
        "HAMiGPUCoresNearlyExhausted",
        {"node": cluster.NODE, "device_uuid": cluster.gpu_uuid(0, cluster.UNLIMITED.gpu)},
        ANY_STATE,
    ),
    # the driver-limited pod is Pending until the scheduler has placed it on driver-node
    ("driver-limited container", "HAMiGPUPodPending", {"pod": cluster.DRIVER_LIMITED.name}, ("pending",)),
    # the real kube-scheduler retries each unschedulable scenario pod: their filter failures, by reason
    ("pending pod", "HAMiSchedulerFilterFailuresHigh", {"reason": "CardInsufficientMemory"}, ANY_STATE),
    ("expired handshake", "HAMiSchedulerFilterFailuresHigh", {"reason": "NodeUnregistered"}, ANY_STATE),
    ("unhealthy device", "HAMiSchedulerFilterFailuresHigh", {"reason": "CardNotHealth"}, ANY_STATE),
    ("fragmented node", "HAMiSchedulerFilterFailuresHigh", {"reason": "CardTypeMismatch"}, ANY_STATE),
    # the L4 pod's pending reason: the A100 nodes, driver-node now among them, refuse it as
    # CardTypeMismatch, more of them than fragmented-node refuses it as CardInsufficientMemory
    ("fragmented node", "HAMiSchedulerPendingPods", {"reason": "CardTypeMismatch"}, ANY_STATE),
    # each batch pod's bind holds sim-node's lock for a moment, and each new batch pod waits for the
    # stand-in's next scheduling pass: pending, never held for the for:
    ("batch pods", "HAMiNodeLockHeldTooLong", {"node": cluster.NODE}, ("pending",)),
    ("batch pods", "HAMiGPUPodPending", {"namespace": "ml-batch"}, ("pending",)),
    # a scrape inside a simulation step sees a batch container's region already changed and the
    # driver's accounting not yet: a gap for one scrape, pending, never held for the for:
    ("batch pods", "HAMiVGPUShimUnderReports", {"namespace": "ml-batch"}, ("pending",)),
]


def _longest_for() -> float:
    """The longest ``for:`` of the rules the stack loaded (the test copy: minutes as seconds)."""
    rules = yaml.safe_load(promconfig.fast_rules(RULES.read_text(encoding="utf-8")))
    alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r and "for" in r]
    return max(promconfig.seconds(r["for"]) for r in alerts)


def test_every_alert_the_demo_raises_comes_from_a_scenario(stack: Stack) -> None:
    """After the longest ``for:``, every pending or firing alert is one a scenario names."""
    need(MONITOR, SCHEDULER, DEVICE_PLUGIN)
    poll(_alert_fires(stack, "HAMiGPUOvercommitExhaustionRisk", {}), "the over-commit alert")
    time.sleep(_longest_for())  # the stack has run at least this long after the slowest scenario's onset
    explained = [(a, labels, ANY_STATE) for _, _, a, labels in SCENARIOS] + [
        (a, labels, states) for _, a, labels, states in SIDE_ALERTS
    ]
    alerts = prometheus(stack).alerts()

    def named(a: dict[str, Any]) -> bool:
        got = a["labels"]
        return any(
            got["alertname"] == name and labels.items() <= got.items() and a["state"] in states
            for name, labels, states in explained
        )

    unexplained = [f"{a['state']} {a['labels']}" for a in alerts if not named(a)]
    assert not unexplained, "no scenario explains:\n" + "\n".join(unexplained)


def test_the_banner_s_defrag_plans_the_l4_pod_on_the_live_demo(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    """The banner's defrag line, run as printed: the L4 pod's plan moves a pod off an L4."""
    need(SCHEDULER)
    tune = demo.tool("hami-tune")
    (defrag,) = [line for line in demo.commands(stack) if line.startswith(f"{tune} defrag ")]
    tune_main(shlex.split(defrag.removeprefix(tune + " ")))
    out = capsys.readouterr().out
    l4 = f"scenarios/{cluster.FRAG_PENDING}"
    assert f"fits now: {l4}" not in out
    step = rf"^\d+\. on {cluster.FRAG_NODE}, move 1 pod\(s\) \(ml-infer/\S+ -> [\w-]+\); then .*{l4}"
    assert re.search(step, out, re.M), out


def _replayed(snapshot: Path) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        tune_main(["simulate", str(snapshot), "--set", "deviceSplitCount=5", "--json"])
    fidelity: dict[str, Any] = json.loads(out.getvalue())["fidelity"]
    return fidelity


def test_the_simulator_replays_the_live_demo(stack: Stack, tmp_path: Path) -> None:
    """Once the demo is busy (batch pods placed, and some deleted again), `hami-doctor snapshot` from
    the API alone and `--from-prometheus` (the configuration and the pods still there read from the
    cluster), then `hami-tune simulate`: replaying the current configuration reproduces at least 95 %
    of the placements either snapshot can judge. The API no longer shows the deleted pods: the
    placements made while they held cards are left out of its comparison, and counted as such."""
    need(MONITOR, SCHEDULER, DEVICE_PLUGIN)
    batch = 'hami_vgpu_memory_allocated_bytes{namespace="ml-batch"}'

    def count(expr: str) -> int:
        got = prometheus(stack).query(f"count(count by (pod) ({expr}))")
        return int(float(got[0]["value"][1])) if got else 0

    def busy() -> int | None:
        now, ever = count(batch), count(f"last_over_time({batch}[10m])")
        return ever if now >= 3 and ever > now else None

    poll(busy, "batch pods placed by the scheduler, and one of them deleted again", timeout=3 * WAIT_S)
    kube = ["--kubeconfig", str(stack.kubeconfig)]
    sources = {
        "api": kube,
        "prometheus": ["--from-prometheus", stack.url("prometheus"), "--since", "10m", "--step", "1s", *kube],
    }
    results: dict[str, dict[str, Any]] = {}
    for source, argv in sources.items():
        snapshot = tmp_path / f"live-{source}.json"
        assert doctor_main(["snapshot", "-o", str(snapshot), *argv], stdout=io.StringIO()) == 0
        results[source] = _replayed(snapshot)
    report = "\n".join(
        f"{source}: {f['same']} of {f['compared']} reproduced ({f['notCompared']} not compared); "
        f"first differences: {json.dumps(f['differences'][:5], indent=1)}"
        for source, f in results.items()
    )
    print(report)
    api, prom = results["api"], results["prometheus"]
    assert prom["compared"] >= 3 and prom["notCompared"] == 0, report
    assert api["notCompared"] > 0, report  # the deleted batch pods' successors
    for f in (api, prom):
        assert f["compared"] >= 1, report
        assert f["same"] >= 0.95 * f["compared"], report


def test_the_driver_limits_one_container_and_catches_the_shim_that_under_reports(stack: Stack) -> None:
    """The demo's driver accounting: scenarios/shim-underreports fires HAMiVGPUShimUnderReports; the
    driver-limited pod, placed by the scheduler on driver-node (whose device plugin runs
    --memory-enforcement driver), shows the driver's limits from its Allocate beside HAMi-core's
    region, is not "not limited", and the device-plugin dashboard's enforcement panel shows both modes."""
    need(MONITOR, SCHEDULER, DEVICE_PLUGIN)
    shim, limited = cluster.SHIM_UNDERREPORTS.name, cluster.DRIVER_LIMITED.name
    poll(_alert_fires(stack, "HAMiVGPUShimUnderReports", {"pod": shim}), "HAMiVGPUShimUnderReports")
    prom = prometheus(stack)
    # firing only: a scrape that lands inside a simulation step (a batch container's region written,
    # the driver's accounting not yet) makes a pending alert that its for: never lets fire
    firing = [
        a["labels"]
        for a in prom.alerts()
        if a["labels"]["alertname"] == "HAMiVGPUShimUnderReports" and a["state"] == "firing"
    ]
    assert {a.get("pod") for a in firing} == {shim}
    hard = f'hami_vgpu_source_memory_limit_bytes{{pod="{limited}", limit="hard"}}'
    limits = poll(lambda: prom.query(hard) if len(prom.query(hard)) == 3 else None, "both sources' limits")
    assert {s["metric"]["node"] for s in limits} == {cluster.DRIVER_NODE}
    assert {s["metric"]["source"]: float(s["value"][1]) for s in limits} == {
        "hami-core": 0,  # HAMi-core runs without a memory limit: the driver holds it
        "nvml": cluster.DRIVER_LIMITED.mem_mib * 2**20,
        "dmem": cluster.DRIVER_LIMITED.mem_mib * 2**20,
    }
    used = prom.query(f'hami_vgpu_source_memory_used_bytes{{pod="{limited}"}}')
    assert {s["metric"]["source"] for s in used} == {"hami-core", "nvml", "dmem"}
    assert not prom.query(f'hami_vgpu_unlimited_processes{{pod="{limited}"}}')
    assert not [a for a in prom.alerts() if a["labels"].get("pod") == limited and a["state"] == "firing"]
    enforced = prom.query("hami_device_memory_enforcement == 1")
    assert {(s["metric"]["node"], s["metric"]["enforcement"]) for s in enforced} == {
        (cluster.NODE, "hami-core"),
        (cluster.DRIVER_NODE, "driver"),
    }
    panel = _capacity_panel(stack, "Memory enforcement", DASHBOARDS / "hami-device-plugin.json")
    assert {(s["metric"]["node"], s["metric"]["enforcement"]) for s in panel} == {
        (cluster.NODE, "hami-core"),
        (cluster.DRIVER_NODE, "driver"),
    }
    # the doctor on driver-node agrees with the monitor: the driver holds the limit, nothing to warn of
    _, doc = _doctor(
        stack, "pod", f"scenarios/{limited}", "--prometheus-url", stack.url("prometheus"),
        hook_path=stack.driver_work / "hook",
    )  # fmt: skip
    (walk,) = [s for s in doc["sections"] if s["title"] == f"pod scenarios/{limited}: GPU limits"]
    got = [(f["code"], f["severity"]) for f in walk["findings"]]
    assert got[0] == ("gpulimit.memory.driver", "ok") and got[-1] == ("accounting.agree", "ok"), got
    assert {severity for _, severity in got} == {"ok"}, got


LOCK_ALERT = "HAMiNodeLockHeldTooLong"
LOCK_LEFT = timedelta(seconds=40)  # how long the re-dated lock still holds locked-node


def _lock_signals(stack: Stack) -> tuple[bool, int, tuple[str, str]]:
    """The lock alert firing for locked-node; the doctor's exit code and its lock finding."""
    firing = _alert_fires(stack, LOCK_ALERT, {"node": cluster.LOCKED_NODE})()
    code, doc = _doctor(stack, "node", cluster.LOCKED_NODE)
    findings = doc["sections"][0]["findings"]
    (lock,) = [(f["code"], f["severity"]) for f in findings if f["code"].startswith("node.lock.")]
    others = {f["severity"] for f in findings if not f["code"].startswith("node.lock.")}
    assert others <= {"ok", "info"}, findings  # so that the exit code is the lock's
    return firing, code, lock


def test_the_doctor_and_the_lock_alert_follow_a_lock_through_its_life(stack: Stack) -> None:
    """One semantics (docs/runbooks/HAMiNodeLockHeldTooLong.md): while a lock holds the node, the alert
    fires and the doctor warns; once it expired, the alert resolves and the doctor says info (exit 0).

    The pinned pod's lock holds locked-node for the whole module (LOCK_TIMEOUT); here it is re-dated,
    same owner, to expire LOCK_LEFT from now, and both signals are sampled across the expiry: they must
    agree at every sample except within Prometheus's lag after the expiry (a scrape and an evaluation).
    A lock younger than the alert's ``for:`` is not compared: this module's rules divide ``for:`` by 60,
    the doctor's threshold (thresholds.yaml) is not. Runs last: locked-node's lock stays expired."""
    need(SCHEDULER)
    node_url = f"{stack.kube_url}/api/v1/nodes/{cluster.LOCKED_NODE}"
    owner = f",scenarios,{cluster.PINNED}"

    def lock_value() -> str:
        annotations = requests.get(node_url, timeout=10).json()["metadata"].get("annotations") or {}
        return str(annotations.get(ann.NODE_LOCK, ""))

    poll(lambda: lock_value().endswith(owner), "the pinned pod's lock on locked-node")
    poll(_alert_fires(stack, LOCK_ALERT, {"node": cluster.LOCKED_NODE}), "the lock alert")
    expires = datetime.now(UTC).replace(microsecond=0) + LOCK_LEFT
    value = format_node_lock(NodeLock(expires - LOCK_TIMEOUT, "scenarios", cluster.PINNED))
    requests.patch(
        node_url, json={"metadata": {"annotations": {ann.NODE_LOCK: value}}}, timeout=10,
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()

    held = 0
    while datetime.now(UTC) < expires - timedelta(seconds=5):  # the doctor's run may take seconds
        firing, code, lock = _lock_signals(stack)
        assert (firing, code, lock) == (True, EXIT_WARNING, ("node.lock.stuck", "warning")), "held"
        held += 1
        time.sleep(1.0)
    assert held >= 3, "too few samples while the lock held the node"

    # after the expiry: the scheduler stops counting the lock, the alert resolves within its lag
    poll(lambda: datetime.now(UTC) > expires + timedelta(seconds=1) or None, "the lock to expire")
    schedulable = f'hami_scheduler_node_schedulable{{node="{cluster.LOCKED_NODE}"}} == 1'
    poll(lambda: prometheus(stack).query(schedulable), "the scheduler to count locked-node schedulable")
    poll(lambda: not _alert_fires(stack, LOCK_ALERT, {"node": cluster.LOCKED_NODE})(), "the alert to resolve")
    for _ in range(5):
        firing, code, lock = _lock_signals(stack)
        assert (firing, code, lock) == (False, EXIT_OK, ("node.lock.expired", "info")), "expired"
        time.sleep(1.0)
