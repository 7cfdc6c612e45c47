"""The real Kubernetes control plane for tests, the demo and the benchmarks: etcd, kube-apiserver,
kube-scheduler and kubectl built from the Go module proxy at pinned versions (``build``), run on
loopback with TLS and client certificates (``run``), the chart's scheduler pod laid out as local
processes (``schedconfig``). ``python -m hami.testing.controlplane`` (``make control-plane``) builds
and starts one. docs/design/control-plane.md has the choices."""

from hami.testing.controlplane.build import (
    ETCD_VERSION,
    K8S_VERSION,
    Binaries,
    BuildError,
    cached,
    ensure,
)
from hami.testing.controlplane.pki import ADMIN, KUBE_SCHEDULER, service_account_user
from hami.testing.controlplane.run import ControlPlane
from hami.testing.controlplane.schedconfig import ChartFiles, extender_args, scheduler_config

__all__ = [
    "ADMIN",
    "ETCD_VERSION",
    "K8S_VERSION",
    "KUBE_SCHEDULER",
    "Binaries",
    "BuildError",
    "ChartFiles",
    "ControlPlane",
    "cached",
    "ensure",
    "extender_args",
    "scheduler_config",
    "service_account_user",
]
