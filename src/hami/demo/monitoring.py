"""The stack's monitoring half: Debian's Prometheus and Alertmanager with this checkout's rules,
Alertmanager configuration and dashboards. Each ``*_argv`` writes the server's configuration for the
stack's addresses under ``work`` and returns the command line that serves it; starting and waiting
stay with ``hami.demo.stack``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import requests

from hami.demo import promconfig
from hami.testing.prometheus import PROMETHEUS

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "alerts" / "hami-rules.yaml"
ALERTMANAGER_CONFIG = ROOT / "alerts" / "alertmanager.yaml"
DASHBOARDS = ROOT / "dashboards"
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"


def alertmanager_argv(work: Path, bind: str, url: str, receiver: str, fast: bool) -> list[str]:
    """Alertmanager on ``bind``, reached at ``url``, notifying the webhook at ``receiver``."""
    config = work / "alertmanager.yml"
    config.write_text(
        promconfig.alertmanager_config(
            ALERTMANAGER_CONFIG.read_text(encoding="utf-8"),
            receiver,
            group_wait="1s" if fast else "10s",
        )
    , encoding="utf-8")
    return [
        ALERTMANAGER,
        f"--config.file={config}",
        f"--storage.path={work / 'alertmanager-data'}",
        f"--web.listen-address={bind}",
        # links in notifications and the UI point here, not at this machine's hostname
        f"--web.external-url={url}",
        "--cluster.listen-address=",  # no HA gossip port: one instance, nothing else to bind
    ]


# Exemplars (the trace ID of a sampled observation, docs/design/tracing.md) are kept only with this
# feature on; Prometheus reads them from OpenMetrics scrapes, which it asks for first.
EXEMPLAR_STORAGE = "--enable-feature=exemplar-storage"


def prometheus_argv(
    work: Path,
    bind: str,
    url: str,
    *,
    targets: Mapping[str, Sequence[str]],
    rules: Path,
    alertmanager: str,
    scrape_interval: str,
    evaluation_interval: str,
) -> list[str]:
    """Prometheus on ``bind``, reached at ``url``, scraping ``targets`` (job -> addresses) with
    ``rules`` loaded and alerting the Alertmanager at ``alertmanager``."""
    config = work / "prometheus.yml"
    config.write_text(
        promconfig.prometheus_config(targets, [rules], alertmanager, scrape_interval, evaluation_interval)
    , encoding="utf-8")
    return [
        PROMETHEUS,
        f"--config.file={config}",
        f"--storage.tsdb.path={work / 'prometheus-data'}",
        f"--web.listen-address={bind}",
        # alerts' generator links (and Alertmanager's "Source") point here
        f"--web.external-url={url}",
        "--web.enable-lifecycle",
        EXEMPLAR_STORAGE,
    ]


def prometheus_page(base: str, page: str) -> str:
    """The URL of a Prometheus UI page that answers on this build: Debian's 2.42 ships only the
    classic UI, under ``/classic/``; upstream builds serve ``/<page>``."""
    try:
        if requests.get(f"{base}/{page}", timeout=5, allow_redirects=False).status_code == 200:
            return f"{base}/{page}"
    except requests.RequestException:
        pass
    return f"{base}/classic/{page}"
