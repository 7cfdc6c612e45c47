"""`python -m hami.testing.kubeapi --port N --kubeconfig FILE`: run the emulator standalone."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

import yaml

from hami.testing.kubeapi.server import SERVING_PREFIX, KubeAPIServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hami.testing.kubeapi", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: let the OS pick a free port")
    parser.add_argument("--kubeconfig", type=Path, help="write a kubeconfig for the server here")
    parser.add_argument("--history", type=int, default=1000, help="watch history window (changes)")
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help="container logs for kubectl logs: DIR/<ns>_<pod>/<container>.log",
    )
    args = parser.parse_args(argv)

    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with KubeAPIServer(args.host, args.port, history=args.history, log_dir=args.log_dir) as server:
        if args.kubeconfig is not None:
            args.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
            args.kubeconfig.write_text(yaml.safe_dump(server.kubeconfig(), sort_keys=False), encoding="utf-8")
        print(SERVING_PREFIX + server.url, flush=True)
        done.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
