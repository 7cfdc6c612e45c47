"""The product end to end: Debian's Prometheus scrapes the running monitor, scheduler extender and device
plugin on the simulated cluster (``hami.testing.stack``, the processes of ``make demo``) with the rules
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

import io
import json
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import requests
import yaml
from dashboards import generate

from hami.core import thresholds
from hami.doctor.findings import EXIT_BROKEN, EXIT_OK, EXIT_WARNING
from hami.doctor.main import main as doctor_main
from hami.testing import cluster, dashqueries, demo, promconfig
from hami.testing.controlplane import Binaries
from hami.testing.monitoring import ALERTMANAGER, DASHBOARDS, RULES
from hami.testing.prometheus import PROMETHEUS, PROMTOOL
from hami.testing.stack import (
    DEVICE_PLUGIN,
    MONITOR,
    SCHEDULER,
    Ports,
    Stack,
    StackOptions,
    installed,
)
from hami.testing.wait import wait_until

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
        # whole module, not only for the default 5m
        node_lock_timeout="30m",
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
    expected = {stack.metrics_targets()[job]: job for job in stack.metrics_targets()}
    assert {t["labels"]["instance"]: t["labels"]["job"] for t in active} == expected


# HAMi v2.10's own name (docs/design/scheduler.md §7.1): promtool's naming lint flags its `_count`
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


def _capacity_panel(stack: Stack, title: str) -> list[dict[str, Any]]:
    """The series of one panel of the capacity dashboard, its variables at every value (Grafana's All)."""
    prom = prometheus(stack)
    variables = dashqueries.variable_queries(CAPACITY_BOARD)
    values = {name: prom.label_values(*mq) for name, mq in variables.items()}
    exprs = [q.expr for q in dashqueries.panel_queries(CAPACITY_BOARD) if q.panel == title]
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
    text = demo.banner(stack, [])
    # the Kubernetes API emulator's root is not a page: it answers API paths only
    # pages only: the tools' base addresses (--scheduler-url, --prometheus-url) are checked by the
    # doctor/tune tests, and the Kubernetes API emulator's root answers API paths only
    pages = "\n".join(line for line in text.splitlines() if not re.search(r"hami-(doctor|tune)", line))
    urls = [u.rstrip(",.") for u in re.findall(r"https?://\S+", pages)]
    # and kube-apiserver's root wants a client certificate
    urls = [u for u in urls if u != stack.kube_url and (stack.real is None or u != stack.real.cp.url)]
    assert any("/alerts" in u for u in urls) and any(u.startswith(stack.url("alertmanager")) for u in urls)
    for url in urls:
        got = requests.get(url, timeout=10)
        assert got.status_code == 200, (url, got.status_code)
    assert str(stack.notifications) in text
    assert f"pod scenarios/{cluster.PENDING}" in text


def test_every_doctor_command_the_banner_prints_reads_the_demo(stack: Stack) -> None:
    """Run in-process with the printed arguments: a report each (0-2), never a usage or cluster error."""
    need(SCHEDULER)
    doctor = demo.tool("hami-doctor")
    lines = [line for line in demo.commands(stack) if line.startswith(doctor + " ")]
    assert len(lines) == 4, lines
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


def _doctor(stack: Stack, *args: str) -> tuple[int, dict[str, Any]]:
    """``hami-doctor`` run on sim-node: a pod's GPU-limit walk reads the node's files there."""
    out = io.StringIO()
    argv = [*args, "--kubeconfig", str(stack.kubeconfig), "--scheduler-url", stack.url(SCHEDULER), "--json"]
    if args[0] == "pod":
        argv += ["--hook-path", str(stack.hook_path)]
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
