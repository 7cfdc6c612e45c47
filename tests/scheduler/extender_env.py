"""Helpers for the extender end-to-end tests: a cluster in the emulator and a running extender."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import requests

from hami.core.codec.node_devices import encode_node_devices
from hami.core.devices import DeviceInfo
from hami.core.kube.options import KubeOptions
from hami.scheduler.extender.daemon import Extender, Options
from hami.testing.kubeapi import KubeAPIServer


def wait_until(check: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def gpu_node(
    name: str,
    *,
    gpus: int = 2,
    mem: int = 8000,
    count: int = 10,
    annotations: dict[str, str] | None = None,
    allocatable: int | None = None,
) -> dict[str, Any]:
    devs = [
        DeviceInfo(
            id=f"GPU-{name}-{i}",
            index=i,
            count=count,
            devmem=mem,
            devcore=100,
            type="NVIDIA-Tesla T4",
            mode="hami-core",
            health=True,
        )
        for i in range(gpus)
    ]
    annos = {"hami.io/node-nvidia-register": encode_node_devices(devs), **(annotations or {})}
    n = gpus if allocatable is None else allocatable
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": annos},
        "status": {"allocatable": {"nvidia.com/gpu": str(n * count)}},
    }


def gpu_pod(
    name: str,
    *,
    gpus: int = 1,
    mem: int | None = 1000,
    cores: int | None = None,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)}
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"},
    }


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


def filter_pod(ext: Extender, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    r = requests.post(url(ext, "/filter"), json={"Pod": pod, "NodeNames": nodes}, timeout=30)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def bind_pod(ext: Extender, pod: dict[str, Any], node: str) -> str:
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


def create_pod(api: KubeAPIServer, ext: Extender, pod: dict[str, Any]) -> dict[str, Any]:
    """Create the pod through the API (so it gets a uid) and wait until the extender's cache has it."""
    stored = api.store.put(pod)
    ns, name = stored["metadata"]["namespace"], stored["metadata"]["name"]
    wait_until(lambda: ext.state.get_pod(ns, name), what=f"pod {name} in cache")
    return stored


def events_for(api: KubeAPIServer, name: str) -> list[tuple[str, str]]:
    return [
        (e["reason"], e["message"])
        for e in api.store.list("events")
        if e.get("involvedObject", {}).get("name") == name
    ]
