"""The list+watch cache against the API emulator over real HTTP."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from hami.core.kube.client import new_api_client
from hami.core.kube.informer import Informer
from hami.core.kube.options import KubeOptions
from hami.testing.builders import pod
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until

WAIT = 10.0  # seconds: a generous bound for anything to happen on a loaded machine


class Recorder:
    """Handler calls in order, thread-safe."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def _add(self, kind: str, obj: dict[str, Any]) -> None:
        with self._lock:
            self.calls.append((kind, obj["metadata"]["name"]))

    def on_add(self, obj: dict[str, Any]) -> None:
        self._add("add", obj)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        assert old["metadata"]["name"] == new["metadata"]["name"]
        self._add("update", new)

    def on_delete(self, obj: dict[str, Any]) -> None:
        self._add("delete", obj)

    def snapshot(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self.calls)


@pytest.fixture
def quiet_api() -> Iterator[KubeAPIServer]:
    """An emulator that sends no bookmarks, so the events a watch carries are exactly the changes."""
    with KubeAPIServer(bookmark_interval=3600) as server:
        yield server


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def make_informer(registry: CollectorRegistry) -> Iterator[Callable[..., Informer]]:
    made: list[tuple[Informer, Any]] = []

    def make(server: KubeAPIServer, **kwargs: Any) -> Informer:
        api = new_api_client(KubeOptions(host=server.url, qps=-1, timeout=5), registry=registry)
        kwargs.setdefault("backoff_initial", 0.05)
        kwargs.setdefault("backoff_max", 0.2)
        informer = Informer(api, **kwargs)
        made.append((informer, api))
        return informer

    yield make
    for informer, api in made:
        informer.stop()
        assert not any(t.is_alive() for t in informer._threads)
        api.close()


def _errors(registry: CollectorRegistry, reason: str, resource: str = "pods") -> float:
    value = registry.get_sample_value(
        "hami_kube_watch_errors_total", {"resource": resource, "reason": reason})
    return value or 0.0


def test_sync_then_events_reach_cache_and_handlers(
    kube_api: KubeAPIServer, make_informer: Callable[..., Informer], registry: CollectorRegistry
) -> None:
    kube_api.store.put(pod(name="a"))
    kube_api.store.put(pod(name="b", namespace="other"))
    informer = make_informer(kube_api)
    seen = Recorder()
    informer.add_handler(seen.on_add, seen.on_update, seen.on_delete)
    assert not informer.has_synced()
    informer.start()
    assert informer.wait_for_sync(WAIT)
    assert registry.get_sample_value("hami_kube_informer_synced", {"resource": "pods"}) == 1
    assert sorted(o["metadata"]["name"] for o in informer.list()) == ["a", "b"]
    assert informer.get("other/b")["metadata"]["namespace"] == "other"
    assert sorted(seen.snapshot()) == [("add", "a"), ("add", "b")]

    kube_api.store.put(pod(name="a", node_name="n1"))
    kube_api.store.put(pod(name="c"))
    kube_api.store.remove("pods", "b", "other")
    wait_until(lambda: len(seen.snapshot()) == 5, WAIT, "three more handler calls")
    assert seen.snapshot()[2:] == [("update", "a"), ("add", "c"), ("delete", "b")]
    assert informer.get("default/a")["spec"]["nodeName"] == "n1"
    assert informer.get("other/b") is None
    # A handler added late first hears of every cached object.
    late = Recorder()
    informer.add_handler(on_add=late.on_add)
    assert sorted(late.snapshot()) == [("add", "a"), ("add", "c")]
    # Synced from one list; everything since came from watches.
    assert kube_api.requests.count("GET", "/api/v1/pods$", limit="500") == 1


def test_namespace_and_label_selector_limit_the_cache(
    kube_api: KubeAPIServer, make_informer: Callable[..., Informer]
) -> None:
    kube_api.store.put(pod(name="gpu", labels={"app": "train"}))
    kube_api.store.put(pod(name="cpu", labels={"app": "web"}))
    kube_api.store.put(pod(name="elsewhere", namespace="other", labels={"app": "train"}))
    informer = make_informer(kube_api, namespace="default", label_selector="app=train")
    informer.start()
    assert informer.wait_for_sync(WAIT)
    kube_api.store.put(pod(name="gpu2", labels={"app": "train"}))
    kube_api.store.put(pod(name="cpu2", labels={"app": "web"}))
    wait_until(lambda: informer.get("default/gpu2") is not None, WAIT, "gpu2 in the cache")
    assert sorted(o["metadata"]["name"] for o in informer.list()) == ["gpu", "gpu2"]


def test_cluster_scoped_resources_are_keyed_by_name(
    kube_api: KubeAPIServer, make_informer: Callable[..., Informer]
) -> None:
    kube_api.store.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}})
    informer = make_informer(kube_api, resource=("", "v1", "nodes"))
    informer.start()
    assert informer.wait_for_sync(WAIT)
    assert informer.get("node-1") is not None


def test_dropped_watch_resumes_from_last_resource_version_without_relisting(
    quiet_api: KubeAPIServer, make_informer: Callable[..., Informer], registry: CollectorRegistry
) -> None:
    quiet_api.store.put(pod(name="a"))
    quiet_api.faults.add(method="GET", path="/api/v1/pods$", drop_watch=True, after_events=1)
    informer = make_informer(quiet_api)
    seen = Recorder()
    informer.add_handler(seen.on_add)
    informer.start()
    assert informer.wait_for_sync(WAIT)
    listed_rv = informer.last_resource_version()
    # The first watch delivers b, then is cut before c: c must come from the resumed watch.
    b = quiet_api.store.put(pod(name="b"))
    c = quiet_api.store.put(pod(name="c"))
    wait_until(lambda: informer.get("default/c") is not None, WAIT, "c via the resumed watch")
    assert _errors(registry, "connection") == 1
    watches = [r for r in quiet_api.requests.records if r.query.get("watch") == "true"]
    assert [w.query["resourceVersion"] for w in watches[:2]] == [
        listed_rv, b["metadata"]["resourceVersion"]]
    assert quiet_api.requests.count("GET", "/api/v1/pods$", limit="500") == 1
    assert informer.last_resource_version() == c["metadata"]["resourceVersion"]
    assert seen.snapshot() == [("add", "a"), ("add", "b"), ("add", "c")]


def test_expired_resource_version_relists_and_reconciles(
    quiet_api: KubeAPIServer, make_informer: Callable[..., Informer], registry: CollectorRegistry
) -> None:
    quiet_api.store.put(pod(name="a"))
    quiet_api.store.put(pod(name="b"))
    # The list and the first watch request each wait 1.5 s in the server; while the watch waits,
    # the test changes the pods and compacts the history, so the watch starts from a
    # resourceVersion that is gone: the emulator answers with an ERROR event, 410 Expired.
    quiet_api.faults.add(method="GET", path="/api/v1/pods$", delay=1.5, times=2)
    informer = make_informer(quiet_api)
    seen = Recorder()
    informer.add_handler(seen.on_add, seen.on_update, seen.on_delete)
    informer.start()
    assert informer.wait_for_sync(WAIT)
    quiet_api.store.put(pod(name="a", node_name="n1"))
    quiet_api.store.remove("pods", "b", "default")
    quiet_api.store.compact()
    wait_until(lambda: informer.get("default/b") is None, WAIT, "b gone from the cache")
    assert _errors(registry, "gone") == 1
    assert quiet_api.requests.count("GET", "/api/v1/pods$", limit="500") == 2
    assert informer.get("default/a")["spec"]["nodeName"] == "n1"
    assert informer.has_synced()
    assert seen.snapshot() == [("add", "a"), ("add", "b"), ("update", "a"), ("delete", "b")]


def test_http_410_on_a_watch_request_relists(
    kube_api: KubeAPIServer, make_informer: Callable[..., Informer], registry: CollectorRegistry
) -> None:
    informer = make_informer(kube_api, watch_timeout=1)  # the server ends each watch after 1 s
    informer.start()
    assert informer.wait_for_sync(WAIT)
    kube_api.faults.add(method="GET", path="/api/v1/pods$", status=410)
    wait_until(lambda: kube_api.requests.count("GET", "/api/v1/pods$", limit="500") == 2, WAIT, "a relist")
    assert _errors(registry, "gone") == 1


def test_list_errors_back_off_and_are_counted(
    kube_api: KubeAPIServer, make_informer: Callable[..., Informer], registry: CollectorRegistry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube_api.store.put(pod(name="a"))
    kube_api.faults.add(method="GET", path="/api/v1/pods$", status=500, times=3)
    informer = make_informer(kube_api)
    with caplog.at_level(logging.INFO, logger="hami.core.kube.informer"):
        informer.start()
        assert informer.wait_for_sync(WAIT)
    assert _errors(registry, "status_500") == 3
    assert kube_api.requests.count("GET", "/api/v1/pods$", limit="500") == 4
    assert informer.get("default/a") is not None
    # Three failures of one kind: one warning, then one line when it works again.
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith("informer pods: list failed: 500 ")
    assert "informer pods: list/watch working again" in [r.getMessage() for r in caplog.records]


def test_a_failing_handler_is_counted_and_the_informer_goes_on(
    kube_api: KubeAPIServer, make_informer: Callable[..., Informer], registry: CollectorRegistry
) -> None:
    informer = make_informer(kube_api)
    seen = Recorder()

    def broken(obj: dict[str, Any]) -> None:
        raise RuntimeError("handler bug")

    informer.add_handler(on_add=broken)
    informer.add_handler(on_add=seen.on_add)
    informer.start()
    assert informer.wait_for_sync(WAIT)
    kube_api.store.put(pod(name="a"))
    kube_api.store.put(pod(name="b"))
    wait_until(lambda: len(seen.snapshot()) == 2, WAIT, "both adds")
    assert registry.get_sample_value(
        "hami_kube_informer_handler_errors_total", {"resource": "pods"}) == 2


def test_resync_replays_updates(kube_api: KubeAPIServer, make_informer: Callable[..., Informer]) -> None:
    kube_api.store.put(pod(name="a"))
    informer = make_informer(kube_api, resync=0.1)
    seen = Recorder()
    informer.add_handler(on_update=seen.on_update)
    informer.start()
    assert informer.wait_for_sync(WAIT)
    wait_until(lambda: seen.snapshot().count(("update", "a")) >= 2, WAIT, "two resyncs")


def test_stop_ends_an_open_watch(kube_api: KubeAPIServer, make_informer: Callable[..., Informer],
                                 registry: CollectorRegistry) -> None:
    informer = make_informer(kube_api, watch_timeout=3600)
    informer.start()
    assert informer.wait_for_sync(WAIT)
    wait_until(lambda: kube_api.requests.count("GET", "/api/v1/pods$", watch="true") == 1, WAIT, "a watch")
    informer.stop()
    assert not any(t.is_alive() for t in informer._threads)
    assert registry.get_sample_value("hami_kube_informer_synced", {"resource": "pods"}) == 0
