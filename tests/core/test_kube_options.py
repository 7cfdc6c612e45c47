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


@pytest.mark.parametrize("argv", [["--kube-timeout=-1"], ["--kube-burst=-1"]])
def test_invalid_values_are_clear_errors(argv: list[str]) -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        parse(*argv)


def test_kubeconfig_falls_back_to_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", "/a/config:/b/config")
    assert KubeOptions().resolved_kubeconfig() == "/a/config"
    assert KubeOptions(kubeconfig="/c").resolved_kubeconfig() == "/c"
    monkeypatch.delenv("KUBECONFIG")
    assert KubeOptions().resolved_kubeconfig() is None
