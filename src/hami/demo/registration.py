"""A device plugin's registration for a node that runs no plugin process (the stack's
fragmented-node): its handshake annotation answered as ``REPORTED`` every register interval, so the
scheduler keeps the node's devices, until ``stop()``."""

from __future__ import annotations

import contextlib
import threading
from datetime import datetime

import requests

from hami.core import annotations as ann
from hami.core.codec.handshake import REPORTED, Handshake, format_handshake

REPORT_EVERY, REPORT_TIMEOUT = 30.0, 5.0  # the device plugin's register interval; one PATCH's limit


class HandshakeReporter:
    def __init__(self, kube_url: str, node: str) -> None:
        self._url = f"{kube_url}/api/v1/nodes/{node}"
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="handshakes", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(REPORT_TIMEOUT + 1)

    def _run(self) -> None:
        headers = {"Content-Type": "application/merge-patch+json"}
        while not self._stopping.wait(REPORT_EVERY):
            value = format_handshake(Handshake(REPORTED, datetime.now().astimezone()))
            body = {"metadata": {"annotations": {ann.NODE_HANDSHAKE: value}}}
            with contextlib.suppress(requests.RequestException):  # the API is stopping; the next try says
                requests.patch(self._url, json=body, headers=headers, timeout=REPORT_TIMEOUT)
