"""Fixtures of the attack tests: TLS material and a running extender over a one-node cluster.

Every attack in this directory goes to 127.0.0.1 only, with a bounded number of connections and
requests, and every wait has a deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hami.core import annotations as ann
from hami.core.codec.node_devices import encode_node_devices
from hami.core.kube.options import KubeOptions
from hami.scheduler.extender.daemon import Extender, Options
from hami.testing import cluster
from hami.testing.certs import TlsFiles, tls_files
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.processes import wait_until

NODE = "n1"


@pytest.fixture
def tls(tmp_path: Path) -> TlsFiles:
    return tls_files(tmp_path)


@pytest.fixture
def make_extender(kube_api: KubeAPIServer) -> Callable[..., AbstractContextManager[Extender]]:
    """``with make_extender(**options) as ext``: a synced extender over one GPU node, ``n1``."""
    register = encode_node_devices(cluster.devices(0, 2))
    kube_api.store.put({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "annotations": {ann.NODE_REGISTER: register}},
        "status": {"allocatable": {ann.RESOURCE_GPU: "20"}},
    })

    @contextmanager
    def running(**overrides: Any) -> Iterator[Extender]:
        opts = Options(
            http_bind="127.0.0.1:0", metrics_bind="127.0.0.1:0",
            kube=KubeOptions(qps=-1, host=kube_api.url, timeout=5.0), register_tick=0.2, gc_freeze=False,
        )
        ext = Extender(replace(opts, **overrides))
        ext.start()
        try:
            wait_until(ext.state.synced.is_set, 20, "the extender's caches")
            yield ext
        finally:
            ext.stop()

    return running


@pytest.fixture
def extender(make_extender: Callable[..., AbstractContextManager[Extender]]) -> Iterator[Extender]:
    with make_extender() as ext:
        yield ext
