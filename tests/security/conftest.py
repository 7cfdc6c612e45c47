"""Fixtures of the attack tests: TLS material and a running extender over a one-node cluster.

Every attack in this directory goes to 127.0.0.1 only, with a bounded number of connections and
requests, and every wait has a deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path

import pytest

from hami.scheduler.extender.daemon import Extender
from hami.testing.builders import gpu_node
from hami.testing.certs import TlsFiles, tls_files
from hami.testing.extender import running
from hami.testing.kubeapi import KubeAPIServer

NODE = "n1"


@pytest.fixture
def tls(tmp_path: Path) -> TlsFiles:
    return tls_files(tmp_path)


@pytest.fixture
def make_extender(kube_api: KubeAPIServer) -> Callable[..., AbstractContextManager[Extender]]:
    """``with make_extender(**options) as ext``: a synced extender over one GPU node, ``n1``."""
    kube_api.store.put(gpu_node(NODE))
    return partial(running, kube_api)


@pytest.fixture
def extender(make_extender: Callable[..., AbstractContextManager[Extender]]) -> Iterator[Extender]:
    with make_extender() as ext:
        yield ext
