"""Shared fixtures. Keep this file small and general; component-specific fixtures live near their tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from hami.testing import controlplane
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.processes import untranslated

# Every child the suite starts (bash, kubectl, promtool, the daemons) inherits this environment: its
# messages, which tests parse, in untranslated UTF-8 whatever locale the suite was started in.
_UNTRANSLATED = untranslated(os.environ)
for _var in set(os.environ) - set(_UNTRANSLATED):
    del os.environ[_var]
os.environ.update(_UNTRANSLATED)

KUBE_CLIENT_TIMEOUT = 5.0  # seconds; short, so that a hung call fails a test instead of stalling it


class TimeoutApiClient(client.ApiClient):
    """An ApiClient whose calls default to a request timeout (watches excepted: they idle by design)."""

    def __init__(self, configuration: client.Configuration, timeout: float) -> None:
        super().__init__(configuration)
        self.default_timeout = timeout

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("_request_timeout") is None and "watch=true" not in url:
            kwargs["_request_timeout"] = self.default_timeout
        return super().call_api(method, url, *args, **kwargs)


@pytest.fixture
def kube_api() -> Iterator[KubeAPIServer]:
    """A started Kubernetes API emulator (see hami.testing.kubeapi); stopped after the test."""
    with KubeAPIServer() as server:
        yield server


@pytest.fixture
def kube_client(kube_api: KubeAPIServer) -> Iterator[client.ApiClient]:
    """An official `kubernetes.client.ApiClient` for `kube_api`: 5 s request timeout, no retries."""
    config = client.Configuration()
    config.host = kube_api.url
    config.retries = False  # one HTTP request per call, so request counts and faults are exact
    api = TimeoutApiClient(config, KUBE_CLIENT_TIMEOUT)
    yield api
    api.close()


@pytest.fixture
def kube_config_file(kube_api: KubeAPIServer, tmp_path: Path) -> Path:
    """A kubeconfig file pointing at `kube_api` (for code that loads one, like the daemons)."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kube_api.kubeconfig(), sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def control_plane_binaries() -> controlplane.Binaries:
    """The real control plane's binaries, built on first use (``make control-plane`` builds them with
    progress shown). Where they cannot be built: a failure in CI (CI=true), else a skip saying why."""
    try:
        return controlplane.ensure()
    except controlplane.BuildError as err:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"the real control plane cannot be built in CI: {err}", pytrace=False)
        pytest.skip(f"the real control plane cannot be built here (make control-plane says why): {err}")


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, control_plane_binaries: controlplane.Binaries
) -> Iterator[controlplane.ControlPlane]:
    """etcd, kube-apiserver (and kube-scheduler, once a test starts it) built from
    k8s.io/kubernetes at ``controlplane.K8S_VERSION``, shared by the session: tests give their
    objects names of their own. Logs in ``<tmp>/controlplane*/logs``."""
    work = tmp_path_factory.mktemp("controlplane")
    with controlplane.ControlPlane(work, binaries=control_plane_binaries) as cp:
        yield cp
