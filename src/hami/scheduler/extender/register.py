"""The register pass (docs/design/scheduler-extender.md §6.1, §1.3): node annotations → registered
``NodeState``s, and the handshake.

HAMi's ``RegisterFromNodeAnnotations`` re-decodes every node's register annotation and GETs and
patches nodes on every 15 s tick; HAMi's heap profile (docs/guides/profiling.md §2.2) shows it as the
scheduler's top allocator. Here a node is decoded only when one of its annotation texts changed, the handshake
is written only when §1.3 says so (the value does not contain ``Requesting``), from the
informer's copy without a GET, so an idle cluster costs no API call per tick.

Only the leader writes (handshake, cleanup); a follower decodes the same way so that it answers
``/filter`` from a warm cache.

Section signs (§) refer to docs/design/scheduler-annotations.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from hami.core import annotations as ann
from hami.core import klog, tracing
from hami.core.codec.errors import CodecError
from hami.core.codec.handshake import check_handshake, format_requesting, parse_handshake
from hami.core.kube import errors
from hami.core.kube.patches import patch_node_annotations
from hami.core.objects import annotations_of, name_of
from hami.scheduler.engine.nodes import NodeState, Unregistered, node_state
from hami.scheduler.engine.requests import int_quantity
from hami.scheduler.extender.state import (
    DECODE_ERROR,
    HANDSHAKE_EXPIRED,
    HEALTHY,
    UNREGISTERED,
    ClusterState,
    NodeRecord,
)

log = klog.get_logger(__name__)

TICK_SECONDS = 15.0


def allocatable_gpus(node: Mapping[str, Any], resource: str) -> int:
    status = node.get("status")
    alloc = status.get("allocatable") if isinstance(status, Mapping) else None
    value = alloc.get(resource) if isinstance(alloc, Mapping) else None
    return int_quantity(value) or 0


class Register:
    def __init__(
        self,
        state: ClusterState,
        api_client: Any,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        now: Callable[[], datetime] = lambda: datetime.now().astimezone(),
        on_node_gone: Callable[[str], None] = lambda _n: None,
        on_synced: Callable[[], None] = lambda: None,
        on_leader_pass: Callable[[], None] = lambda: None,
    ) -> None:
        self.state = state
        self.api = api_client
        self.is_leader = is_leader
        self.now = now
        self.on_node_gone = on_node_gone
        self.on_synced = on_synced
        self.on_leader_pass = on_leader_pass
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> None:
        """The full pass of every tick: every node, then (leader only) ``on_leader_pass``."""
        started = time.monotonic()
        span = tracing.own_span("hami.scheduler.register")  # a trace of its own: no pod's
        leader = self.is_leader()
        now = self.now()
        resource = self.state.nvidia.resource_count_name
        seen: set[str] = set()
        for node in self.state.node_informer.list():
            name = name_of(node)
            if not name:
                continue
            seen.add(name)
            self._visit(name, node, now, leader, resource)
        with self.state.lock:
            gone = [n for n in self.state.records if n not in seen]
        for name in gone:
            self._forget(name)
        if leader:
            self.on_leader_pass()
        if not self.state.synced.is_set():
            self.on_synced()
            self.state.synced.set()
        self.state.metrics.register_duration.observe(time.monotonic() - started)
        tracing.end(span, attributes={"hami.register.nodes": len(seen), "hami.register.leader": leader})

    def run_nodes(self, names: set[str]) -> None:
        """Revisit only nodes whose objects changed (added, updated, deleted) since the last pass."""
        leader = self.is_leader()
        now = self.now()
        resource = self.state.nvidia.resource_count_name
        for name in sorted(names):
            node = self.state.get_node(name)
            if node is None:
                self._forget(name)
            else:
                self._visit(name, node, now, leader, resource)

    def _forget(self, name: str) -> None:
        with self.state.lock:
            known = self.state.records.pop(name, None) is not None
            self.state.nodes.pop(name, None)
        if known:
            self.on_node_gone(name)

    def _visit(self, name: str, node: Mapping[str, Any], now: datetime, leader: bool, resource: str) -> None:
        annos = annotations_of(node)
        value = annos.get(ann.NODE_HANDSHAKE)
        current = allocatable_gpus(node, resource)
        healthy, need_update = check_handshake(value, now, current)
        record = self.state.records.get(name) or NodeRecord(UNREGISTERED)
        if need_update and leader:
            self._write_handshake(name, format_requesting(now))
        # NVIDIA wrapper (§1.3): a node whose allocatable GPUs dropped to 0 is unhealthy at once.
        if current == 0 and record.reported_gpus > 0:
            healthy = False
        record.reported_gpus = current
        record.handshake = None
        if value is not None:
            try:
                record.handshake = parse_handshake(value).time
            except CodecError:
                record.handshake = None
        if not healthy:
            with self.state.lock:
                was_registered = self.state.nodes.pop(name, None) is not None
                record.state, record.node, record.key = HANDSHAKE_EXPIRED, None, ()
                self.state.records[name] = record
            if was_registered and leader:
                log.error(
                    "node %s: handshake %r expired and no %s allocatable, cleaning up", name, value, resource
                )
                self._write_handshake(name, None)
                record.reported_gpus = 0
            return
        key = (
            annos.get(ann.NODE_REGISTER),
            annos.get(ann.NODE_PAIR_SCORE),
            annos.get(ann.NODE_DEVICE_CORDON),
        )
        if key == record.key and record.state != HANDSHAKE_EXPIRED:
            self.state.records[name] = record
            return
        decoded = node_state(name, annos)
        self._report(name, decoded)
        with self.state.lock:
            record.key = key
            if isinstance(decoded, NodeState):
                record.state, record.node, record.error = HEALTHY, decoded, ""
                self.state.nodes[name] = decoded
            else:
                record.state = DECODE_ERROR if decoded.source else UNREGISTERED
                record.error, record.node = decoded.reason, None
                self.state.nodes.pop(name, None)
            self.state.records[name] = record

    def _report(self, name: str, decoded: NodeState | Unregistered) -> None:
        if isinstance(decoded, NodeState):
            log.v(5).info("node %s: registered %d devices", name, len(decoded.devices))
        elif decoded.source:
            self.state.metrics.decode_errors.labels(decoded.source).inc()
            log.error("node %s: skipping undecodable device annotations: %s", name, decoded.reason)
        else:
            log.v(4).info("node %s: not registered: %s", name, decoded.reason)

    def _write_handshake(self, name: str, value: str | None) -> None:
        try:
            patch_node_annotations(self.api, name, {ann.NODE_HANDSHAKE: value})
            self.state.metrics.register_writes.inc()
            log.v(4).info("node %s: handshake set to %r", name, value)
        except errors.ApiError as err:
            self.state.metrics.api_errors.labels("handshake", errors.error_reason(err)).inc()
            self.state.metrics.reconciliation_errors.labels("handshake").inc()
            log.error("node %s: failed to write %s: %s", name, ann.NODE_HANDSHAKE, err)

    # --- the loop ---------------------------------------------------------------------------

    def start(self, tick: float = TICK_SECONDS) -> None:
        self._thread = threading.Thread(target=self._loop, args=(tick,), name="register", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self.state.wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self, tick: float) -> None:
        next_full = 0.0
        while not self._stop.is_set():
            if not self.state.informers_synced():
                self.state.wake.wait(0.05)
                continue
            self.state.wake.clear()
            full, dirty = self.state.take_register_work()
            try:
                if full or time.monotonic() >= next_full:
                    self.run_once()
                    next_full = time.monotonic() + tick
                elif dirty:
                    self.run_nodes(dirty)
            except Exception as err:  # one bad pass must not end the loop
                self.state.metrics.reconciliation_errors.labels("register").inc()
                log.error("register pass failed: %s", err, exc_info=True)
            self.state.wake.wait(max(next_full - time.monotonic(), 0.0))
