from __future__ import annotations

import argparse

import pytest

from hami.core.kube.options import KubeOptions, add_kube_flags, from_args


def parse(*argv: str) -> KubeOptions:
    parser = argparse.ArgumentParser()
    add_kube_flags(parser)
    return from_args(parser.parse_args(list(argv)))


def test_defaults_are_hamis() -> None:
    opts = parse()
    assert (opts.qps, opts.burst, opts.timeout, opts.kubeconfig) == (5.0, 10, 0.0, None)
    assert opts == KubeOptions()


def test_tuning_guide_values_parse() -> None:
    opts = parse("--kube-qps=50", "--kube-burst=100", "--kube-timeout=30", "--kubeconfig", "/k.yaml")
    assert (opts.qps, opts.burst, opts.timeout, opts.kubeconfig) == (50.0, 100, 30.0, "/k.yaml")


def test_burst_must_be_an_integer() -> None:
    parser = argparse.ArgumentParser()
    add_kube_flags(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--kube-burst=1.5"])


def test_invalid_burst_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        parse("--kube-burst=-1")


@pytest.mark.parametrize(
    ("value", "seconds"), [("30", 30.0), ("2.5", 2.5), ("30s", 30.0), ("1m", 60.0), ("0", 0.0)]
)
def test_timeout_takes_seconds_or_a_go_duration(value: str, seconds: float) -> None:
    assert parse(f"--kube-timeout={value}").timeout == seconds


@pytest.mark.parametrize(("value", "why"), [("-1", "must not be negative"), ("soon", "want a Go duration")])
def test_invalid_timeout_is_a_usage_error(value: str, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(f"--kube-timeout={value}")
    assert f"argument --kube-timeout: invalid duration {value!r}: {why}" in capsys.readouterr().err


def test_kubeconfig_falls_back_to_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", "/a/config:/b/config")
    assert KubeOptions().resolved_kubeconfig() == "/a/config"
    assert KubeOptions(kubeconfig="/c").resolved_kubeconfig() == "/c"
    monkeypatch.delenv("KUBECONFIG")
    assert KubeOptions().resolved_kubeconfig() is None
