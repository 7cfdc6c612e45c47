"""Fixtures: the plugin on FakeNvml and the Kubernetes API emulator, driven by a fake kubelet
(``hami.testing.pluginrig``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hami.testing.kubeapi import KubeAPIServer
from hami.testing.pluginrig import Rig, start_rig


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short directory: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="dp", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def rig(kube_api: KubeAPIServer, kube_client: Any, short_dir: Path) -> Iterator[Rig]:
    r = start_rig(kube_api, kube_client, short_dir)
    yield r
    r.stop()
