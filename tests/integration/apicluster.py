"""An API server for a side-by-side run: the real control plane (``hami.testing.controlplane``: etcd
and kube-apiserver built from k8s.io/kubernetes) where its binaries are built, else the API emulator.
Either way: its URL, an HTTP session its clients authenticate with, and a kubeconfig for daemons."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests
import yaml

from hami.testing import controlplane
from hami.testing.kubeapi import KubeAPIServer


@dataclass
class ApiCluster:
    kind: str  # "kube-apiserver" or "emulator"
    url: str
    session: requests.Session
    kubeconfig: Path
    plane: controlplane.ControlPlane | None = None


def real_available() -> bool:
    return controlplane.cached() is not None


@contextmanager
def api_cluster(workdir: Path, real: bool | None = None) -> Iterator[ApiCluster]:
    """``real``: None picks the real control plane when its binaries are built (``make
    control-plane``), True requires it, False takes the emulator."""
    workdir.mkdir(parents=True, exist_ok=True)
    if real is None:
        real = real_available()
    if real:
        with controlplane.ControlPlane(workdir) as plane:
            yield ApiCluster("kube-apiserver", plane.url, plane.session(), plane.kubeconfig, plane)
        return
    with KubeAPIServer() as api:
        kubeconfig = workdir / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()), encoding="utf-8")
        yield ApiCluster("emulator", api.url, requests.Session(), kubeconfig)
