"""HAMi's node lock ``hami.io/mutex.lock`` (§1.5): LockNode, SetNodeLock, ReleaseNodeLock.

The lock is an annotation written with a merge patch that carries the node's resourceVersion, so
two schedulers (or a scheduler and a device plugin) racing for it get one 409 and the loser
re-reads. A lock older than the expiry, or whose owner pod is gone, is taken over: a crash while
holding it blocks the node for at most the expiry. The expiry is ``--node-lock-timeout``
(default 5m); as in HAMi's scheduler the flag overrides ``HAMI_NODELOCK_EXPIRE``, which only
provides the flag's default here.

Section signs (§) refer to docs/design/scheduler-annotations.md.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Final

from hami.core import annotations as ann
from hami.core import klog
from hami.core.codec.errors import CodecError
from hami.core.codec.nodelock import (
    CONTENTION,
    DEFAULT_TIMEOUT,
    NodeLock,
    format_node_lock,
    is_expired,
    is_locked_message,
    is_owned_by,
    locked_within_message,
    parse_node_lock,
)
from hami.core.duration import DurationError, format_duration, parse_duration
from hami.core.kube import errors, raw
from hami.core.kube.patches import patch_node_annotations
from hami.core.objects import annotations_of, resource_version
from hami.scheduler.extender.metrics import SchedulerMetrics

log = klog.get_logger(__name__)

ENV_EXPIRE: Final = "HAMI_NODELOCK_EXPIRE"
# client-go wait.Backoff HAMi uses: 5 steps, 100 ms, factor 2, jitter 0.5.
STEPS: Final = 5
INITIAL: Final = 0.1
FACTOR: Final = 2.0
JITTER: Final = 0.5
STRATEGY: Final = "{Duration:100ms Factor:2 Jitter:0.5 Steps:5}"


def default_timeout() -> timedelta:
    """``HAMI_NODELOCK_EXPIRE`` if set and valid, else 5m (the ``--node-lock-timeout`` default).

    Unlike HAMi, which takes any Go duration here, a negative one is ignored too: it would make
    every lock expired at once.
    """
    raw_env = os.environ.get(ENV_EXPIRE, "")
    if raw_env:
        try:
            return parse_duration(raw_env)
        except DurationError as err:
            log.warning("ignoring %s: %s; using %s", ENV_EXPIRE, err, format_duration(DEFAULT_TIMEOUT))
    return DEFAULT_TIMEOUT


class NodeLockError(Exception):
    def __init__(self, message: str, contention: bool = False) -> None:
        super().__init__(message)
        self.contention = contention


class NodeLocker:
    def __init__(
        self,
        api_client: Any,
        metrics: SchedulerMetrics,
        timeout: timedelta = DEFAULT_TIMEOUT,
        now: Callable[[], datetime] = lambda: datetime.now().astimezone(),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = api_client
        self.metrics = metrics
        self.timeout = timeout
        self.now = now
        self.sleep = sleep
        self._mutexes: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        metrics.node_lock_timeout.set(timeout.total_seconds())

    def _mutex(self, node: str) -> threading.Lock:
        with self._guard:
            return self._mutexes.setdefault(node, threading.Lock())

    def forget(self, node: str) -> None:
        """Drop the in-process mutex of a deleted node (HAMi ``CleanupNodeLock``)."""
        with self._guard:
            self._mutexes.pop(node, None)

    def _get_node(self, node: str) -> dict[str, Any]:
        found: dict[str, Any] = raw.request_json(
            self.api, "GET", raw.resource_path("", "v1", "nodes", name=node)
        )
        return found

    @staticmethod
    def _value(obj: dict[str, Any]) -> tuple[str | None, str]:
        return annotations_of(obj).get(ann.NODE_LOCK), resource_version(obj)

    def lock_node(self, node: str, namespace: str, name: str, cached: dict[str, Any] | None = None) -> None:
        """HAMi ``LockNode``; raises ``NodeLockError`` (``contention`` set when someone else holds it).

        ``cached`` is the informer's copy of the node. When it shows no lock, one patch with its
        resourceVersion is tried first: the precondition makes that as safe as HAMi's fresh GET
        (any change since, a lock included, answers 409) and saves a request per bind. Whatever
        goes wrong with it falls back to HAMi's path, which reads the node.
        """
        unlocked = cached is not None and self._value(cached)[0] is None
        if unlocked and cached is not None and self._try_cached(node, namespace, name, cached):
            return
        try:
            fetched = self._get_node(node)
        except errors.ApiError as err:
            raise NodeLockError(str(err)) from err
        value, _ = self._value(fetched)
        if value is None:
            self.set_node_lock(node, namespace, name, fetched=fetched)
            return
        try:
            lock = parse_node_lock(value)
        except CodecError as err:
            raise NodeLockError(str(err)) from err
        if is_expired(lock, self.now(), self.timeout):
            # HAMi's words, which the tuning guide tells operators to grep for
            log.info(
                "node %s: node lock expired, releasing %r (older than %s)",
                node, value, format_duration(self.timeout),
            )
            self.metrics.node_lock_expired.labels("expired").inc()
            self.release_node_lock(node, namespace, name, skip_owner_check=True)
            self.set_node_lock(node, namespace, name)
            return
        if (lock.namespace, lock.name) == (namespace, name):
            return  # re-entrant: this pod already holds it
        if lock.namespace and lock.name and self._pod_gone(lock.namespace, lock.name):
            log.info(
                "node %s: lock owner %s/%s is gone, taking the lock over", node, lock.namespace, lock.name
            )
            self.metrics.node_lock_expired.labels("owner_gone").inc()
            self.release_node_lock(node, namespace, name, skip_owner_check=True)
            self.set_node_lock(node, namespace, name)
            return
        raise NodeLockError(locked_within_message(node, self.timeout), contention=True)

    def _try_cached(self, node: str, namespace: str, name: str, cached: dict[str, Any]) -> bool:
        rv = self._value(cached)[1]
        if not rv:
            return False
        new = format_node_lock(NodeLock(self.now().replace(microsecond=0), namespace, name))
        with self._mutex(node):
            try:
                patch_node_annotations(self.api, node, {ann.NODE_LOCK: new}, resource_version=rv)
            except errors.ApiError as err:
                log.v(5).info("node %s: lock from the cached node failed (%s), reading it", node, err)
                return False
        log.v(4).info("node %s: locked by %s/%s", node, namespace, name)
        return True

    def _pod_gone(self, namespace: str, name: str) -> bool:
        try:
            raw.request_json(self.api, "GET", raw.resource_path("", "v1", "pods", namespace, name))
        except errors.NotFound:
            return True
        except errors.ApiError as err:
            raise NodeLockError(str(err)) from err
        return False

    def _retry(self, node: str, step: Callable[[], bool]) -> None:
        """Run ``step`` until it returns True, retrying any error but contention with backoff."""
        delay = INITIAL
        last: Exception | None = None
        for attempt in range(STEPS):
            try:
                if step():
                    return
            except NodeLockError:
                raise
            except errors.ApiError as err:
                last = err
                log.v(4).info("node %s: lock attempt %d failed: %s", node, attempt + 1, err)
            if attempt < STEPS - 1:
                self.sleep(delay * (1 + random.random() * JITTER))
                delay *= FACTOR
        raise NodeLockError(f"failed to set node lock (node={node}, retry strategy={STRATEGY}): {last}")

    def set_node_lock(
        self, node: str, namespace: str, name: str, fetched: dict[str, Any] | None = None
    ) -> None:
        """HAMi ``SetNodeLock``; ``fetched`` is a node just read by the caller (saves two GETs)."""
        with self._mutex(node):
            try:
                latest = fetched if fetched is not None else self._get_node(node)
            except errors.ApiError as err:
                raise NodeLockError(str(err)) from err
            if self._value(latest)[0] is not None:
                raise NodeLockError(is_locked_message(node), contention=True)
            new = format_node_lock(NodeLock(self.now().replace(microsecond=0), namespace, name))
            first = [latest]

            def step() -> bool:
                current, rv = self._value(first.pop() if first else self._get_node(node))
                if current is not None:
                    if is_owned_by(current, namespace, name):
                        return True  # our earlier patch landed although its answer was lost
                    raise NodeLockError(is_locked_message(node), contention=True)
                patch_node_annotations(self.api, node, {ann.NODE_LOCK: new}, resource_version=rv)
                return True

            self._retry(node, step)
            log.v(4).info("node %s: locked by %s/%s", node, namespace, name)

    def release_node_lock(self, node: str, namespace: str, name: str, skip_owner_check: bool = False) -> None:
        with self._mutex(node):
            try:
                start, _ = self._value(self._get_node(node))
            except errors.ApiError as err:
                raise NodeLockError(str(err)) from err
            if start is None:
                return
            owned_format = "," in start
            if not skip_owner_check and owned_format and not is_owned_by(start, namespace, name):
                log.v(4).info("node %s: lock %r not set by %s/%s, leaving it", node, start, namespace, name)
                return

            def step() -> bool:
                current, rv = self._value(self._get_node(node))
                if current is None:
                    return True
                if skip_owner_check or not owned_format:
                    if current != start:
                        return True
                elif not is_owned_by(current, namespace, name):
                    return True
                patch_node_annotations(self.api, node, {ann.NODE_LOCK: None}, resource_version=rv)
                return True

            self._retry(node, step)
            log.v(4).info("node %s: lock released for %s/%s", node, namespace, name)


__all__ = ["CONTENTION", "NodeLockError", "NodeLocker", "default_timeout"]
