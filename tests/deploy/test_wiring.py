"""deploy/: the pieces point at each other: kube-scheduler -> extender, API server -> webhook,
Prometheus -> metrics (with the job names of src/hami/core/thresholds.yaml), and the PrometheusRule stays
generated."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from alerts.contract import OPTIONAL_GROUP
from scripts import gen_deploy

from hami.core import names, thresholds
from hami.scheduler.engine.admission import WebhookConfig, admit
from hami.scheduler.engine.device_config import load_nvidia_config
from hami.testing import chart
from tests.deploy import manifests as m


def _scheduler_config() -> dict[str, Any]:
    cm = m.find("ConfigMap", names.SCHEDULER_CONFIGMAP)
    doc: dict[str, Any] = yaml.safe_load(cm["data"]["config.yaml"])
    return doc


def test_kube_scheduler_is_configured_from_its_config_map() -> None:
    sidecar = next(c for c in m.containers() if c.spec["name"] == "kube-scheduler")
    flag = next(a for a in sidecar.spec["command"] if a.startswith("--config="))
    path = flag.split("=", 1)[1]
    mount, name = path.rsplit("/", 1)
    volume = sidecar.volume_at(mount)
    assert volume["configMap"]["name"] == names.SCHEDULER_CONFIGMAP
    assert name == "config.yaml"
    assert sidecar.workload == m.hami_container("hami-scheduler").workload


def test_extender_config_points_at_the_extender() -> None:
    cfg = _scheduler_config()
    args = m.hami_container("hami-scheduler").args()
    (extender,) = cfg["extenders"]
    url = urlsplit(extender["urlPrefix"])
    assert url.hostname == "127.0.0.1"  # a sidecar: same pod, loopback
    assert url.port == m.bind_port(args.http_bind)
    assert url.scheme == ("https" if args.cert_file and args.key_file else "http")
    assert (extender["filterVerb"], extender["bindVerb"]) == ("filter", "bind")
    assert extender["nodeCacheCapable"] is True
    assert extender["weight"] == 1
    assert extender["enableHTTPS"] is (url.scheme == "https")
    # the bind's PodGroup lock retries must give up before kube-scheduler does
    assert args.node_lock_retry_timeout.total_seconds() < float(extender["httpTimeout"].rstrip("s"))
    nvidia = load_nvidia_config(None)
    wanted = {
        nvidia.resource_count_name,
        nvidia.resource_memory_name,
        nvidia.resource_memory_percentage_name,
        nvidia.resource_core_name,
        nvidia.resource_priority_name,
    }
    managed = extender["managedResources"]
    assert {r["name"] for r in managed} == wanted
    assert all(r["ignoredByScheduler"] is True for r in managed)


def test_extender_and_kube_scheduler_authenticate_each_other() -> None:
    """kube-scheduler checks the extender's serving certificate and presents a client certificate
    from the same CA, which the extender requires (--client-ca-file)."""
    cfg = _scheduler_config()
    ext = m.hami_container("hami-scheduler")
    sidecar = next(c for c in m.containers() if c.spec["name"] == names.KUBE_SCHEDULER_CONTAINER)
    args = ext.args()
    serving = m.find("Certificate", "hami-scheduler-tls")
    client = m.find("Certificate", "hami-scheduler-client-tls")
    for path in (args.cert_file, args.key_file, args.client_ca_file):
        assert ext.volume_at(path.rsplit("/", 1)[0])["secret"]["secretName"] == serving["spec"]["secretName"]
    assert args.client_ca_file.endswith("/ca.crt")
    tls = cfg["extenders"][0]["tlsConfig"]
    assert sidecar.volume_at(tls["caFile"].rsplit("/", 1)[0])["secret"]["secretName"] == serving["spec"][
        "secretName"
    ]
    for key in ("certFile", "keyFile"):
        assert sidecar.volume_at(tls[key].rsplit("/", 1)[0])["secret"]["secretName"] == client["spec"][
            "secretName"
        ]
    assert serving["spec"]["issuerRef"] == client["spec"]["issuerRef"]  # one CA
    assert client["spec"]["usages"] == ["client auth"]
    assert tls["serverName"] in serving["spec"]["dnsNames"]


def test_network_policy_closes_the_extender_port() -> None:
    """kube-scheduler calls the extender over loopback; from outside the pod only the webhook,
    the metrics and kube-scheduler's own authenticated port are reachable."""
    policy = m.find("NetworkPolicy", names.SCHEDULER_DEPLOYMENT)
    ext = m.hami_container("hami-scheduler")
    assert m.labels_match(policy["spec"]["podSelector"]["matchLabels"], ext.pod_labels)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    opened = {ext.port(p["port"]) if p["port"] != "kube-sched" else 10259
              for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert opened == {names.WEBHOOK_PORT, names.SCHEDULER_METRICS_PORT, 10259}
    assert m.bind_port(ext.args().http_bind) == names.EXTENDER_PORT not in opened


def test_leader_election_is_shared_by_sidecar_and_extender() -> None:
    cfg = _scheduler_config()
    args = m.hami_container("hami-scheduler").args()
    election = cfg["leaderElection"]
    assert election["leaderElect"] is True
    assert election["resourceName"] == args.leader_elect_resource_name
    assert election["resourceNamespace"] == args.leader_elect_resource_namespace == m.NAMESPACE
    assert cfg["profiles"] == [{"schedulerName": args.scheduler_name}]


def test_webhook_reaches_the_extender_and_speaks_its_review_version() -> None:
    (webhook,) = m.find("MutatingWebhookConfiguration", "hami-webhook")["webhooks"]
    ref = webhook["clientConfig"]["service"]
    assert ref["path"] == "/webhook"
    service = m.find("Service", ref["name"])
    assert service["metadata"]["namespace"] == ref["namespace"]
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == ref["port"]]
    ext = m.hami_container("hami-scheduler")
    assert m.labels_match(service["spec"]["selector"], ext.pod_labels)
    # its own listener, without client certificates: the API server has none from the chart's CA
    assert ext.port(port["targetPort"]) == m.bind_port(ext.args().webhook_bind) == names.WEBHOOK_PORT
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u1",
            "object": {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}},
        },
    }
    answer = admit(review, WebhookConfig("hami-scheduler", True, load_nvidia_config(None)), None)
    assert answer["apiVersion"].split("/")[1] in webhook["admissionReviewVersions"]
    assert webhook["sideEffects"] == "None" and webhook["timeoutSeconds"] == 10
    assert webhook["rules"][0]["operations"] == ["CREATE"]
    skip = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    assert skip in webhook["namespaceSelector"]["matchExpressions"]
    # only a namespace label (an administrator's) exempts pods: a pod's author cannot opt out
    assert "objectSelector" not in webhook
    cert = m.find("Certificate", "hami-scheduler-tls")
    assert f"{ref['name']}.{ref['namespace']}.svc" in cert["spec"]["dnsNames"]
    injected = m.find("MutatingWebhookConfiguration", "hami-webhook")["metadata"]["annotations"]
    assert injected["cert-manager.io/inject-ca-from"] == f"{m.NAMESPACE}/{cert['metadata']['name']}"


def test_service_monitors_scrape_each_daemon_under_its_alerting_job_name() -> None:
    jobs = thresholds.load()["jobs"]
    program_of_job = {
        jobs["monitor"]: "hami-monitor",
        jobs["scheduler"]: "hami-scheduler",
        jobs["deviceplugin"]: "hami-device-plugin",
    }
    scraped: dict[str, str] = {}
    for sm in m.of_kind("ServiceMonitor"):
        spec = sm["spec"]
        services = [
            s
            for s in m.of_kind("Service")
            if m.labels_match(spec["selector"]["matchLabels"], s["metadata"].get("labels", {}))
            and s["metadata"]["namespace"] in spec["namespaceSelector"]["matchNames"]
        ]
        assert len(services) == 1, sm["metadata"]["name"]
        service = services[0]
        job = service["metadata"]["labels"][spec["jobLabel"]]  # the Operator's `job` label
        (endpoint,) = spec["endpoints"]
        (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
        daemon = m.hami_container(program_of_job[job])
        assert m.labels_match(service["spec"]["selector"], daemon.pod_labels)
        assert daemon.port(port["targetPort"]) == m.bind_port(daemon.args().metrics_bind_address), job
        scraped[job] = sm["metadata"]["name"]
    assert set(scraped) == set(program_of_job)


def _rules(name: str) -> list[dict[str, Any]]:
    data = yaml.safe_load((m.ROOT / "alerts" / name).read_text(encoding="utf-8"))
    groups: list[dict[str, Any]] = data["groups"]
    return groups


def test_prometheus_rule_is_the_alert_rules() -> None:
    """The rules file's groups; not the optional file's (HAMiSchedulerMetricsAbsent, off by default as
    HAMi proposes)."""
    assert m.find("PrometheusRule", "hami")["spec"]["groups"] == _rules("hami-rules.yaml")
    assert OPTIONAL_GROUP not in {g["name"] for g in _rules("hami-rules.yaml")}


def test_optional_alerts_render_only_when_asked() -> None:
    asked = chart.render(sets=["prometheusRule.enabled=true", "prometheusRule.optionalAlerts=true"])
    (rule,) = [o for o in asked if o["kind"] == "PrometheusRule"]
    assert rule["spec"]["groups"] == _rules("hami-rules.yaml") + _rules("hami-rules-optional.yaml")
    names = {r.get("alert") for g in rule["spec"]["groups"] for r in g["rules"]}
    assert "HAMiSchedulerMetricsAbsent" in names


def test_generated_files_are_current() -> None:
    assert gen_deploy.main(["--check"]) == 0, "stale: run python scripts/gen_deploy.py"


def test_check_reports_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "hami.yaml"
    stale.write_text("kind: List\n", encoding="utf-8")
    monkeypatch.setattr(gen_deploy, "DEPLOY", stale)
    monkeypatch.setattr(gen_deploy, "CHART_RULES", tmp_path / "hami-rules.yaml")
    monkeypatch.setattr(gen_deploy, "CHART_OPTIONAL_RULES", tmp_path / "hami-rules-optional.yaml")
    assert gen_deploy.main(["--check"]) == 1
    assert gen_deploy.main([]) == 0
    assert gen_deploy.main(["--check"]) == 0
    assert stale.read_text(encoding="utf-8") == (m.DEPLOY / "hami.yaml").read_text(encoding="utf-8")


def test_prometheus_rule_groups_pass_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(promtool).exists():
        pytest.skip("promtool is not installed")
    spec = m.find("PrometheusRule", "hami")["spec"]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    done = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
