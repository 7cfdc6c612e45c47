"""``make control-plane``: build the pinned binaries (once), start etcd, kube-apiserver and
kube-scheduler on loopback, print the kubeconfig, and stop everything on Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from hami.testing.controlplane.build import ETCD_VERSION, K8S_VERSION, BuildError, ensure
from hami.testing.controlplane.run import ControlPlane
from hami.testing.processes import StartError

PLAIN_SCHEDULER = (
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    "leaderElection:\n  leaderElect: false\n"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hami.testing.controlplane", description=__doc__)
    parser.add_argument("--build-only", action="store_true", help="build (or find) the binaries, then exit")
    parser.add_argument(
        "--workdir", type=Path, default=Path(".controlplane"), help="data, certificates, logs"
    )
    parser.add_argument(
        "--scheduler-config", type=Path, help="a KubeSchedulerConfiguration (default: default-scheduler)"
    )
    args = parser.parse_args(argv)
    try:
        binaries = ensure()
    except BuildError as err:
        what = f"Kubernetes {K8S_VERSION} / etcd {ETCD_VERSION}"
        print(f"control plane: cannot build {what}: {err}", file=sys.stderr)
        return 2
    if args.build_only:
        for path in binaries.all():
            print(path)
        return 0
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    cp = ControlPlane(args.workdir.resolve(), binaries=binaries)
    try:
        cp.start()
        config = PLAIN_SCHEDULER
        if args.scheduler_config:
            config = args.scheduler_config.read_text(encoding="utf-8")
        cp.start_kube_scheduler(config)
    except (StartError, OSError) as err:
        cp.stop()
        print(f"control plane: {err}", file=sys.stderr)
        return 2
    print(
        f"etcd {ETCD_VERSION} at {cp.etcd_url}, kube-apiserver {K8S_VERSION} at {cp.url}, "
        "kube-scheduler running\n"
        f"  {binaries.kubectl} --kubeconfig {cp.kubeconfig} get --raw /readyz\n"
        f"logs in {cp.procs.log_dir}; Ctrl-C stops everything",
        flush=True,
    )
    stop.wait()
    codes = cp.stop()
    print(f"stopped: {codes}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
