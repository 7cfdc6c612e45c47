"""The demo's Alertmanager receiver: webhook notifications appended to a file, one line per alert.

``python -m hami.demo.alertsink --bind HOST:PORT --out FILE`` answers Alertmanager's webhook POSTs
(``webhook_configs``) and writes each alert of each notification as
``<time> <status> <alertname> <labels> <description>``, so ``tail -f FILE`` shows what a pager would
receive after grouping and inhibition.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flask import Flask, Response, request

from hami.core.serve import serve_wsgi

# Labels every notification line leaves out: the alert's name is printed first, the rest is noise.
_QUIET = frozenset({"alertname", "severity", "job", "instance", "zone", "cluster"})
MAX_BODY = 1 << 20


def lines(notification: Mapping[str, Any], now: datetime) -> list[str]:
    """One line per alert of an Alertmanager webhook notification (version 4)."""
    out = []
    for alert in notification.get("alerts") or []:
        labels = alert.get("labels") or {}
        shown = " ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in _QUIET)
        text = (alert.get("annotations") or {}).get("description", "")
        out.append(
            f"{now.strftime('%Y-%m-%dT%H:%M:%SZ')} {alert.get('status', '?')} "
            f"{labels.get('alertname', '?')} [{labels.get('severity', '?')}] {shown} — {text}".rstrip()
        )
    return out


def make_app(out: Path) -> Flask:
    app = Flask("hami-alertsink")
    guard = threading.Lock()

    @app.post("/")
    def _notify() -> Response:
        body = request.stream.read(MAX_BODY + 1)
        try:
            doc = json.loads(body) if len(body) <= MAX_BODY else None
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            return Response("want an Alertmanager webhook notification (JSON object)\n", status=400)
        with guard, out.open("a", encoding="utf-8") as fh:
            fh.writelines(line + "\n" for line in lines(doc, datetime.now(UTC)))
        return Response("", status=200)

    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hami.demo.alertsink", description=__doc__)
    p.add_argument("--bind", required=True, help="HOST:PORT to listen on")
    p.add_argument("--out", required=True, type=Path, help="file the notifications are appended to")
    args = p.parse_args(argv)
    args.out.touch()
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    server = serve_wsgi(args.bind, make_app(args.out), name="hami-alertsink")
    print(f"alert sink serving on {server.url}, writing {args.out}", flush=True)
    done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
