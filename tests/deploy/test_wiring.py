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
from scripts import gen_deploy_rules

from hami.core import thresholds
from hami.scheduler.engine.admission import WebhookConfig, admit
from hami.scheduler.engine.device_config import load_nvidia_config
from hami.testing import manifests as m


def _scheduler_config() -> dict[str, Any]:
    cm = m.find("ConfigMap", "hami-kube-scheduler-config")
    doc: dict[str, Any] = yaml.safe_load(cm["data"]["config.yaml"])
    return doc


def test_kube_scheduler_is_configured_from_its_config_map() -> None:
    sidecar = next(c for c in m.containers() if c.spec["name"] == "kube-scheduler")
    flag = next(a for a in sidecar.spec["command"] if a.startswith("--config="))
    path = flag.split("=", 1)[1]
    mount, name = path.rsplit("/", 1)
    volume = sidecar.volume_at(mount)
    assert volume["configMap"]["name"] == "hami-kube-scheduler-config"
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


def test_extender_tls_is_the_webhook_certificate() -> None:
    cfg = _scheduler_config()
    ext = m.hami_container("hami-scheduler")
    sidecar = next(c for c in m.containers() if c.spec["name"] == "kube-scheduler")
    args = ext.args()
    cert = m.find("Certificate", "hami-scheduler-tls")
    for path in (args.cert_file, args.key_file):
        assert ext.volume_at(path.rsplit("/", 1)[0])["secret"]["secretName"] == cert["spec"]["secretName"]
    tls = cfg["extenders"][0]["tlsConfig"]
    ca_volume = sidecar.volume_at(tls["caFile"].rsplit("/", 1)[0])
    assert ca_volume["secret"]["secretName"] == cert["spec"]["secretName"]
    assert tls["serverName"] in cert["spec"]["dnsNames"]


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
    assert ext.port(port["targetPort"]) == m.bind_port(ext.args().http_bind)
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
    assert "objectSelector" not in webhook  # a pod author must not be able to opt out
    assert m.find("Namespace", m.NAMESPACE)["metadata"]["labels"]["hami.io/webhook"] == "ignore"
    cert = m.find("Certificate", "hami-scheduler-tls")
    assert f"{ref['name']}.{ref['namespace']}.svc" in cert["spec"]["dnsNames"]
    injected = m.find("MutatingWebhookConfiguration", "hami-webhook")["metadata"]["annotations"]
    assert injected["cert-manager.io/inject-ca-from"] == f"{m.NAMESPACE}/hami-scheduler-tls"


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


def test_prometheus_rule_is_generated_from_the_alert_rules() -> None:
    rules = (m.ROOT / "alerts" / "hami-rules.yaml").read_text(encoding="utf-8")
    on_disk = (m.DEPLOY / "prometheusrule.yaml").read_text(encoding="utf-8")
    assert on_disk == gen_deploy_rules.render(rules), "stale: run python scripts/gen_deploy_rules.py"
    assert gen_deploy_rules.main(["--check"]) == 0
    assert yaml.safe_load(on_disk)["spec"]["groups"] == yaml.safe_load(rules)["groups"]


def test_check_reports_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "prometheusrule.yaml"
    stale.write_text("spec: {}\n", encoding="utf-8")
    monkeypatch.setattr(gen_deploy_rules, "OUT", stale)
    assert gen_deploy_rules.main(["--check"]) == 1
    assert gen_deploy_rules.main([]) == 0
    assert gen_deploy_rules.main(["--check"]) == 0


def test_prometheus_rule_groups_pass_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(promtool).exists():
        pytest.skip("promtool is not installed")
    spec = yaml.safe_load((m.DEPLOY / "prometheusrule.yaml").read_text(encoding="utf-8"))["spec"]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    done = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
