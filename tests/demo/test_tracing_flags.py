"""``make demo`` with tracing: the flag (or HAMI_DEMO_TRACING) turns it on, and the banner says where
the traces are (docs/design/tracing.md §6)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hami.demo import jaeger, monitoring
from hami.demo import main as demo


def test_tracing_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HAMI_DEMO_TRACING", raising=False)
    assert not demo.build_parser().parse_args([]).tracing
    assert demo.build_parser().parse_args(["--tracing"]).tracing
    monkeypatch.setenv("HAMI_DEMO_TRACING", "1")
    assert demo.build_parser().parse_args([]).tracing
    monkeypatch.setenv("HAMI_DEMO_TRACING", "0")
    assert not demo.build_parser().parse_args([]).tracing


def test_the_banner_points_at_jaeger(tmp_path: Path) -> None:
    assert demo.tracing_lines(None, tmp_path / "kubeconfig") == []
    backend = jaeger.Jaeger(Path("/nonexistent/jaeger"), tmp_path)
    backend.query_url = "http://127.0.0.1:16686"
    lines = demo.tracing_lines(backend, tmp_path / "kubeconfig")
    assert any("http://127.0.0.1:16686/search?service=hami-scheduler" in line for line in lines)
    assert any(f"kubectl hami pod ml-batch/batch-job-0 --kubeconfig {tmp_path / 'kubeconfig'}" in line
               for line in lines)


def test_prometheus_keeps_exemplars(tmp_path: Path) -> None:
    argv = monitoring.prometheus_argv(
        tmp_path, "127.0.0.1:0", "http://127.0.0.1:0", targets={}, rules=monitoring.RULES,
        alertmanager="127.0.0.1:0", scrape_interval="1s", evaluation_interval="1s",
    )
    assert "--enable-feature=exemplar-storage" in argv
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text(encoding="utf-8"))
    assert config["storage"]["exemplars"]["max_exemplars"] > 0
