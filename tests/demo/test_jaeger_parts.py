"""hami.demo.jaeger without the binary: the pipeline listens on loopback only, the daemons' tracing
flags, the cache path, and a clear error where no Go can build it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami.core import tracing
from hami.demo import jaeger


def _endpoints(node: object) -> list[str]:
    if isinstance(node, dict):
        own = [v for k, v in node.items() if k == "endpoint"]
        return own + [e for v in node.values() for e in _endpoints(v)]
    return []


def test_every_listener_is_on_a_chosen_loopback_port() -> None:
    cfg = jaeger.config(4001, 4002, 4003)
    assert sorted(_endpoints(cfg)) == [f"127.0.0.1:{p}" for p in (4001, 4002, 4003)]
    assert cfg["service"]["telemetry"]["metrics"] == {"level": "none"}  # no fixed :8888
    assert cfg["service"]["pipelines"]["traces"]["receivers"] == ["otlp"]


def test_daemon_tracing_flags() -> None:
    assert jaeger.daemon_tracing("") == ([], {})
    flags, env = jaeger.daemon_tracing("http://127.0.0.1:4318")
    assert flags == ["--enable-tracing"]
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:4318" and env[tracing.KEY_ENV]


def test_the_cache_is_keyed_by_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HAMI_CACHE", str(tmp_path))
    assert jaeger.cache_dir() == tmp_path / "jaeger" / jaeger.VERSION
    assert jaeger.cached() is None


def test_no_go_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HAMI_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(jaeger.JaegerBuildError, match="Go toolchain is not installed"):
        jaeger.build()
