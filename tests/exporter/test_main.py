"""Daemon entry: required env, flags, durations; `python -m hami.exporter` fails with one clear line."""

import os
import subprocess
import sys

import pytest

from hami.exporter.config import ConfigError, load_config


@pytest.mark.parametrize(("env", "missing"), [({}, "HOOK_PATH"), ({"HOOK_PATH": "/x"}, "NODE_NAME")])
def test_missing_required_env_exits_with_one_line(env: dict[str, str], missing: str) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in ("HOOK_PATH", "NODE_NAME")}
    proc = subprocess.run(
        [sys.executable, "-m", "hami.exporter"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"required environment variable {missing} not set" in lines[0]


def test_flags_and_env() -> None:
    cfg = load_config(
        [
            "--metrics-bind-address",
            ":19394",
            "--legacy-metrics",
            "-v",
            "4",
            "--pod-labels-allowlist",
            "app, team",
        ],
        {"HOOK_PATH": "/usr/local/vgpu", "NODE_NAME": "n1", "HAMI_RESYNC_INTERVAL": "1m30s"},
    )
    assert (cfg.bind, cfg.legacy_metrics, cfg.verbosity, cfg.resync_s) == (":19394", True, 4, 90.0)
    assert cfg.pod_labels_allowlist == ("app", "team")
    default = load_config([], {"HOOK_PATH": "/h", "NODE_NAME": "n"})
    assert (default.bind, default.resync_s, default.legacy_metrics) == (":9394", 300.0, False)


def test_profiling_flags() -> None:
    env = {"HOOK_PATH": "/h", "NODE_NAME": "n"}
    cheap = load_config(["--profiling"], env)
    assert (cheap.profiling, cheap.profiling_heap_from_start) == (True, False)
    traced = load_config(["--profiling", "--profiling.heap-from-start"], env)
    assert (traced.profiling, traced.profiling_heap_from_start) == (True, True)


def test_heap_from_start_without_profiling_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        load_config(["--profiling.heap-from-start"], {"HOOK_PATH": "/h", "NODE_NAME": "n"})
    assert exited.value.code == 2
    assert "--profiling.heap-from-start needs --profiling" in capsys.readouterr().err


def test_invalid_resync_keeps_5m_with_warning() -> None:
    cfg = load_config([], {"HOOK_PATH": "/h", "NODE_NAME": "n", "HAMI_RESYNC_INTERVAL": "5 minutes"})
    assert cfg.resync_s == 300.0 and len(cfg.warnings) == 1


def test_config_error_type() -> None:
    with pytest.raises(ConfigError):
        load_config([], {"NODE_NAME": "n"})


ENV = {"HOOK_PATH": "/h", "NODE_NAME": "n"}


@pytest.mark.parametrize(("text", "seconds"), [("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("2.5s", 2.5)])
def test_resync_interval_is_a_go_duration(text: str, seconds: float) -> None:
    cfg = load_config([], {**ENV, "HAMI_RESYNC_INTERVAL": text})
    assert (cfg.resync_s, cfg.warnings) == (seconds, ())


@pytest.mark.parametrize("text", ["5", "m", "5x", "5m 3s", "-1m"])
def test_invalid_resync_interval_keeps_5m(text: str) -> None:
    cfg = load_config([], {**ENV, "HAMI_RESYNC_INTERVAL": text})
    assert cfg.resync_s == 300.0
    (warning,) = cfg.warnings
    assert warning.startswith(f"invalid HAMI_RESYNC_INTERVAL (invalid duration {text!r}")
    assert warning.endswith("using 5m")
