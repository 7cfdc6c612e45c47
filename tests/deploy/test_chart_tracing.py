"""values.tracing (docs/design/tracing.md): off by default, and on it gives each daemon
--enable-tracing (as its own parser reads it), the standard OTEL_* variables and the signing key
from one Secret; bad values are refused by the schema."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami.core import names
from hami.deviceplugin import main as deviceplugin_main
from hami.exporter import config as exporter_config
from hami.scheduler.extender import main as scheduler_main
from hami.testing import chart

Obj = dict[str, Any]
Parser = Callable[[], argparse.ArgumentParser]
DAEMONS: tuple[tuple[str, str, str, Parser], ...] = (
    ("Deployment", names.SCHEDULER_DEPLOYMENT, names.EXTENDER_CONTAINER, scheduler_main.build_parser),
    ("DaemonSet", names.DEVICE_PLUGIN_DAEMONSET, names.DEVICE_PLUGIN_CONTAINER,
     deviceplugin_main.build_parser),
    ("DaemonSet", names.MONITOR_DAEMONSET, names.MONITOR_CONTAINER, exporter_config.build_parser),
)
ON = {"tracing": {"enabled": True, "endpoint": "http://jaeger.tracing:4318", "ratio": 0.25}}


def _container(objects: list[Obj], kind: str, workload: str, name: str) -> Obj:
    spec = chart.find(objects, kind, workload)["spec"]["template"]["spec"]
    (found,) = [c for c in spec["containers"] if c["name"] == name]
    return dict(found)


def test_off_by_default() -> None:
    objects = chart.render()
    assert not [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"].endswith("trace-key")]
    for kind, workload, name, parser in DAEMONS:
        container = _container(objects, kind, workload, name)
        assert not parser().parse_known_args([str(a) for a in container["args"]])[0].enable_tracing
        assert not [e for e in container.get("env", []) if e["name"].startswith(("OTEL_", "HAMI_TRACE"))]


def test_on_every_daemon_traces_with_the_same_key(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(ON), encoding="utf-8")
    objects = chart.render([values])
    assert not chart.validate(objects)
    secret = chart.find(objects, "Secret", f"{names.RELEASE}-trace-key")
    assert len(secret["data"]["key"]) > 20
    for kind, workload, name, parser in DAEMONS:
        container = _container(objects, kind, workload, name)
        assert parser().parse_known_args([str(a) for a in container["args"]])[0].enable_tracing
        env = {e["name"]: e for e in container["env"]}
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == "http://jaeger.tracing:4318"
        assert env["OTEL_TRACES_SAMPLER"]["value"] == "parentbased_traceidratio"
        assert env["OTEL_TRACES_SAMPLER_ARG"]["value"] == "0.25"
        ref = env["HAMI_TRACE_KEY"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": secret["metadata"]["name"], "key": "key"}


def test_a_key_secret_of_ones_own_is_used_and_none_created() -> None:
    objects = chart.render(sets=["tracing.enabled=true", "tracing.keySecret=mine"])
    assert not [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"].endswith("trace-key")]
    for kind, workload, name, _ in DAEMONS:
        env = {e["name"]: e for e in _container(objects, kind, workload, name)["env"]}
        assert env["HAMI_TRACE_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "mine"
        assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in env  # the SDK's default


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"tracing": {"ratio": 2}}, "at '/tracing/ratio'"),
        ({"tracing": {"sampler": "sometimes"}}, "at '/tracing/sampler'"),
        ({"tracing": {"endpoint": "jaeger:4318"}}, "at '/tracing/endpoint'"),
        ({"tracing": {"enable": True}}, "additional properties 'enable' not allowed"),
    ],
)
def test_bad_tracing_values_get_the_schemas_message(values: Obj, message: str) -> None:
    with pytest.raises(chart.ChartError) as refused:
        chart.render_templates(values)
    assert message in str(refused.value)
