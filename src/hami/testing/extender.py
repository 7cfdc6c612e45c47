"""The scheduler extender under test: in this process against the API emulator (``running``), or as
operators run it, ``python -m hami.scheduler`` in a child process (``daemon``); and the HTTP calls
kube-scheduler makes to it."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import requests

from hami.core.kube.options import KubeOptions
from hami.scheduler.extender.daemon import Extender, Options
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.processes import Daemon
from hami.testing.wait import wait_until

Obj = dict[str, Any]
# The line the daemon logs once both listeners are bound (ports chosen by the OS with :0).
LISTENING = re.compile(r"hami-scheduler extender on (\S+), metrics on (\S+) ")


def opts_for(api: KubeAPIServer, **overrides: Any) -> Options:
    base = Options(
        http_bind="127.0.0.1:0",
        metrics_bind="127.0.0.1:0",
        kube=KubeOptions(qps=-1, host=api.url, timeout=5.0),
        register_tick=0.2,
        gc_freeze=False,  # a freeze in the shared test process would keep every test's cycles alive
    )
    return replace(base, **overrides)


@contextmanager
def running(api: KubeAPIServer, **overrides: Any) -> Iterator[Extender]:
    """A started extender (``Options`` fields as overrides) whose caches have synced."""
    ext = Extender(opts_for(api, **overrides))
    ext.start()
    try:
        wait_until(ext.state.synced.is_set, what="extender synced")
        yield ext
    finally:
        ext.stop()


def url(ext: Extender, path: str) -> str:
    assert ext.http is not None
    return ext.http.url + path


def filter_pod(ext: Extender, pod: Obj, nodes: list[str]) -> Obj:
    """POST /filter as kube-scheduler sends it (node names only); the ExtenderFilterResult."""
    r = requests.post(url(ext, "/filter"), json={"Pod": pod, "NodeNames": nodes}, timeout=30)
    assert r.status_code == 200, r.text
    body: Obj = r.json()
    return body


def bind_pod(ext: Extender, pod: Obj, node: str) -> str:
    """POST /bind; the ``Error`` of the ExtenderBindingResult ("" on success)."""
    meta = pod["metadata"]
    r = requests.post(
        url(ext, "/bind"),
        json={
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": node,
        },
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return str(r.json()["Error"])


def metrics_text(ext: Extender) -> str:
    assert ext.metrics_server is not None
    return requests.get(ext.metrics_server.url + "/metrics", timeout=10).text


def create_pod(api: KubeAPIServer, ext: Extender, pod: Obj) -> Obj:
    """Create the pod through the API (so it gets a uid) and wait until the extender's cache has it."""
    stored = api.store.put(pod)
    ns, name = stored["metadata"]["namespace"], stored["metadata"]["name"]
    wait_until(lambda: ext.state.get_pod(ns, name), what=f"pod {name} in cache")
    return stored


def events_for(api: KubeAPIServer, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the core/v1 events about object ``name``."""
    return [
        (e["reason"], e["message"])
        for e in api.store.list("events")
        if e.get("involvedObject", {}).get("name") == name
    ]


class SchedulerDaemon(Daemon):
    """``python -m hami.scheduler`` as a child; ``url`` and ``metrics_url`` once it listens."""

    def __init__(self, argv: Sequence[str]) -> None:
        super().__init__(argv)
        try:
            found = self.wait_for_line(LISTENING)
        except BaseException:
            self.stop(grace=0)
            raise
        self.url, self.metrics_url = found.group(1), found.group(2)


@contextmanager
def daemon(kubeconfig: Path, *flags: str) -> Iterator[SchedulerDaemon]:
    """The daemon on free ports with no client-side rate limit, plus ``flags``; SIGTERM at the end."""
    d = SchedulerDaemon([
        sys.executable,
        "-m",
        "hami.scheduler",
        f"--kubeconfig={kubeconfig}",
        "--http_bind=127.0.0.1:0",
        "--metrics-bind-address=127.0.0.1:0",
        "--kube-qps=-1",
        *flags,
    ])
    try:
        yield d
    finally:
        d.stop()
