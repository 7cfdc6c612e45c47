"""deploy/grafana and deploy/prometheus: generated, and valid for the tools that load them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from scripts import gen_provisioning as g

from hami.testing.prometheus import PROMTOOL
from tests.deploy import manifests as m


def test_checked_in_files_match_the_generator() -> None:
    assert g.main(["--check"]) == 0


def test_grafana_sidecar_configmap_holds_every_dashboard() -> None:
    cm = yaml.safe_load(g.GRAFANA.read_text(encoding="utf-8"))
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    files = sorted((g.ROOT / "dashboards").glob("*.json"))
    assert sorted(cm["data"]) == [p.name for p in files]
    for path in files:
        assert json.loads(cm["data"][path.name]) == json.loads(path.read_text(encoding="utf-8"))


def test_plain_prometheus_config_says_how_to_keep_exemplars() -> None:
    head = [line for line in g.SCRAPE.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    assert "#   --enable-feature=exemplar-storage" in head


@pytest.mark.skipif(not Path(PROMTOOL).exists(), reason="promtool is not installed")
def test_plain_prometheus_config_is_valid(tmp_path: Path) -> None:
    rules = yaml.safe_load(g.RULES.read_text(encoding="utf-8"))["data"]["hami-rules.yaml"]
    assert rules == (g.ROOT / "alerts" / "hami-rules.yaml").read_text(encoding="utf-8")
    # The alerts off by default ship apart: not in the ConfigMap and rule_files everyone loads.
    assert "HAMiSchedulerMetricsAbsent" not in rules
    optional_cm = yaml.safe_load(g.OPTIONAL_RULES.read_text(encoding="utf-8"))
    optional = optional_cm["data"]["hami-rules-optional.yaml"]
    assert optional == (g.ROOT / "alerts" / "hami-rules-optional.yaml").read_text(encoding="utf-8")
    (tmp_path / "hami-rules.yaml").write_text(rules, encoding="utf-8")
    cfg = yaml.safe_load(g.SCRAPE.read_text(encoding="utf-8"))
    cfg["rule_files"] = [str(tmp_path / "hami-rules.yaml")]
    job = cfg["scrape_configs"][0]
    # the namespace the chart's metrics Services are in (deploy/, the guides' kube-system)
    assert job["kubernetes_sd_configs"] == [{"role": "endpoints", "namespaces": {"names": [m.NAMESPACE]}}]
    # Debian's promtool is built without Kubernetes discovery: check the rest of the job with a static one
    job["static_configs"] = [{"targets": ["127.0.0.1:9395"]}]
    del job["kubernetes_sd_configs"]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    out = subprocess.run(
        [PROMTOOL, "check", "config", str(path)], capture_output=True, text=True, check=False, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    relabel = cfg["scrape_configs"][0]["relabel_configs"]
    assert relabel[0]["regex"] == "(hami-monitor|hami-scheduler|hami-device-plugin)"
