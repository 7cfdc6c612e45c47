"""Shared fixtures. Keep this file small and general; component-specific fixtures live near their tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from hami.testing.kubeapi import KubeAPIServer

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
    path.write_text(yaml.safe_dump(kube_api.kubeconfig(), sort_keys=False))
    return path
