"""API-client options and their command-line flags.

Flag names and defaults follow HAMi's ``pkg/util/client/options.go`` (docs/design/scheduler-extender.md §7.2):
``--kube-qps`` 5 and ``--kube-burst`` 10 are client-go's ``rest.DefaultQPS``/``rest.DefaultBurst``;
``--kube-timeout`` is in seconds and defaults to 0, meaning no timeout. (HAMi's tuning guide lists 15 s as
the default; HAMi's code says 0, and we follow the code: docs/guides/tuning.md §2.1. Its recommended values,
``--kube-qps=50 --kube-burst=100 --kube-timeout=30``, work unchanged.) Beyond HAMi's whole seconds, it also
takes a Go duration (``30s``, ``1m``), as every other duration flag here does.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from datetime import timedelta

from hami.core.duration import duration_flag

DEFAULT_QPS = 5.0
DEFAULT_BURST = 10
DEFAULT_TIMEOUT = 0.0


@dataclass(frozen=True)
class KubeOptions:
    """How to reach the API server and how hard to push it.

    ``qps``/``burst`` keep client-go's edge semantics (see ``ratelimit.effective_limits``):
    0 means the default, a negative QPS disables client-side limiting. ``timeout`` is seconds per
    request, 0 for none. ``host`` (an explicit API server URL) wins over ``kubeconfig``, which wins
    over ``$KUBECONFIG``, then the in-cluster service account, then ``~/.kube/config``.
    """

    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST
    timeout: float = DEFAULT_TIMEOUT
    kubeconfig: str | None = None
    context: str | None = None
    host: str | None = None
    user_agent: str = "hami"

    def __post_init__(self) -> None:
        if self.timeout < 0:
            raise ValueError(f"kube timeout must be >= 0 seconds, got {self.timeout}")
        if self.burst < 0:
            # client-go accepts it, then fails every request with "exceeds limiter's burst".
            raise ValueError(f"kube burst must be >= 0, got {self.burst}")

    def resolved_kubeconfig(self) -> str | None:
        """The kubeconfig file to load: the option, else ``$KUBECONFIG`` (first path), else None."""
        if self.kubeconfig:
            return self.kubeconfig
        env = os.environ.get("KUBECONFIG", "")
        first = env.split(os.pathsep)[0] if env else ""
        return first or None


def add_kube_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``--kube-qps``, ``--kube-burst``, ``--kube-timeout`` and ``--kubeconfig``."""
    group = parser.add_argument_group("Kubernetes API client")
    group.add_argument(
        "--kube-qps", type=float, default=DEFAULT_QPS,
        help="QPS to use while talking with kube-apiserver (default %(default)s).",
    )
    group.add_argument(
        "--kube-burst", type=int, default=DEFAULT_BURST,
        help="Burst to use while talking with kube-apiserver (default %(default)s).",
    )
    group.add_argument(
        "--kube-timeout", type=duration_flag(bare_seconds=True), default=timedelta(seconds=DEFAULT_TIMEOUT),
        help="Timeout to use while talking with kube-apiserver, in seconds (30) or a Go duration (30s); "
        "0 means none (default 0).",
    )
    group.add_argument(
        "--kubeconfig", default="",
        help="Path to a kubeconfig file; default $KUBECONFIG, then in-cluster configuration.",
    )


def from_args(args: argparse.Namespace, user_agent: str = "hami") -> KubeOptions:
    """Build options from flags added by ``add_kube_flags``; invalid values raise ``ValueError``."""
    return KubeOptions(
        qps=float(args.kube_qps),
        burst=int(args.kube_burst),
        timeout=args.kube_timeout.total_seconds(),
        kubeconfig=args.kubeconfig or None,
        user_agent=user_agent,
    )
