"""Doctor fixtures: a seeded emulator and the proof that the doctor only read from it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hami.testing.kubeapi import KubeAPIServer


@pytest.fixture
def api(kube_api: KubeAPIServer) -> Iterator[KubeAPIServer]:
    """`kube_api`, checked after the test: no request other than GET reached it (unless a test
    that used --fix cleared the log)."""
    yield kube_api
    writes = [(r.method, r.path) for r in kube_api.requests.records if r.method != "GET"]
    assert writes == []
