"""Allocate against the cluster: annotation pop/erase, bind phase, node lock (§C.7); which pod is
pending here is ``pendingpods``.

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from hami.core import annotations as ann
from hami.core import klog, tracing
from hami.core.codec.errors import CodecError
from hami.core.codec.mig import decode_mig_allocations, encode_mig_allocations
from hami.core.codec.pod_devices import decode_pod_devices, encode_pod_devices
from hami.core.devices import MODE_MIG, ContainerDevices, MigAllocation, PodDevices
from hami.core.hamicore import HostLayout
from hami.core.nvml import NvmlError
from hami.core.objects import annotations_of, name_of, namespace_of, object_key, uid_of
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.deviceplugin.config import PluginConfig
from hami.deviceplugin.container_setup import (
    HOST_PREPARE_FAILED,
    POD_UPDATE_FAILED,
    AllocateError,
    ContainerAllocation,
    GpuRef,
    PreferredRequest,
    RuntimeOptions,
    align_to_kubelet,
    base_response,
    build_container_allocation,
    check_annotated_devices,
    check_count,
    check_kubelet_ids,
    container_of,
    decode_error,
    has_pending_devices,
    is_mig_request,
    pending_pod_error,
    pop_next_container,
    preferred_allocation,
)
from hami.deviceplugin.inventory import physical_device_id
from hami.deviceplugin.kubeops import NodeOps
from hami.deviceplugin.metrics import PluginMetrics
from hami.deviceplugin.migpartition import MigPartitioner
from hami.deviceplugin.migplan import MIG_CREATE_FAILED, MigMade, MigPlanError, fill, plan
from hami.deviceplugin.pendingpods import PodCache, WrittenPods, bind_order, is_pending_for

log = klog.get_logger(__name__)

def decode_to_allocate(text: str) -> PodDevices:
    """The per-container lists, without the empty entry the codec keeps for the trailing ``;``,
    so that re-encoding after an erase keeps the scheduler's format (``;GPU-b,NVIDIA,5000,0:;``)."""
    pod_devices = decode_pod_devices(text)
    if text.endswith(";") and pod_devices and not pod_devices[-1]:
        return pod_devices[:-1]
    return pod_devices


def to_pb(alloc: ContainerAllocation) -> pb.ContainerAllocateResponse:
    resp = pb.ContainerAllocateResponse(envs=alloc.envs)
    for m in alloc.mounts:
        resp.mounts.append(
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
        )
    for d in alloc.devices:
        resp.devices.append(
            pb.DeviceSpec(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
        )
    resp.annotations.update(alloc.annotations)
    resp.cdi_devices.extend(pb.CDIDevice(name=name) for name in alloc.cdi_devices)
    return resp


ALLOCATE_SPAN = "hami.deviceplugin.allocate"


class Allocator:
    def __init__(
        self,
        node: str,
        cfg: PluginConfig,
        *,
        ops: NodeOps,
        pods: PodCache,
        metrics: PluginMetrics,
        known_ids: Callable[[], frozenset[str]],
        gpus: Callable[[], dict[str, GpuRef]],
        layout: HostLayout,
        plugin_version: str,
        opts: RuntimeOptions,
        mig: MigPartitioner | None = None,
    ) -> None:
        self.node = node
        self.cfg = cfg
        self._ops = ops
        self._pods = pods
        self._metrics = metrics
        self._known_ids = known_ids
        self._gpus = gpus
        self._layout = layout
        self._plugin_version = plugin_version
        self._opts = opts
        self._mig = mig  # operatingmode mig: instances are created at the scheduler's placements
        self._written = WrittenPods()

    def find_pending_pod(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(pod, node): the lock owner when the node is locked, else the earliest-bound pending pod."""
        try:
            node_obj = self._ops.get_node(self.node)
        except Exception as exc:
            raise pending_pod_error(f"failed to get node {self.node}: {exc}") from exc
        lock = annotations_of(node_obj).get(ann.NODE_LOCK, "")
        parts = lock.split(",")
        if len(parts) == 3:
            ns, name = parts[1], parts[2]
            pod = self._written.resolve(f"{ns}/{name}", self._pods.get(f"{ns}/{name}"))
            if pod is None:
                # The informer may trail the scheduler's bind by a moment: one direct read. A lock
                # left by a pod that is gone is not ours to judge; the cache scan below still runs.
                try:
                    pod = self._ops.get_pod(ns, name)
                except Exception as exc:
                    log.warning("node lock owner %s/%s not readable: %s", ns, name, exc)
            if pod is not None and is_pending_for(pod, self.node):
                return pod, node_obj
        seen = (self._written.resolve(object_key(p), p) for p in self._pods.list())
        candidates = [p for p in seen if p is not None and is_pending_for(p, self.node)]
        if not candidates:
            raise pending_pod_error(f"no binding pod found on node {self.node}")
        return min(candidates, key=bind_order), node_obj

    def allocate(self, requests: Sequence[Sequence[str]]) -> list[pb.ContainerAllocateResponse]:
        start = (time.perf_counter(), tracing.now_ns())
        pod: dict[str, Any] | None = None
        node_obj: dict[str, Any] | None = None
        try:
            pod, node_obj = self.find_pending_pod()
            out = self._allocate_for(pod, node_obj, requests)
        except AllocateError as err:
            self._metrics.allocate_errors.labels(self.node, err.reason).inc()
            self._timed(start, pod, "failure", err.message, {"hami.allocate.reason": err.reason})
            log.error("Allocate failed: %s", err.message)
            if pod is not None:
                self._mark_failed(pod, node_obj)
            raise
        self._timed(start, pod, "success", "", {"hami.allocate.containers": len(out)})
        return out

    def _timed(
        self, start: tuple[float, int], pod: dict[str, Any] | None, result: str, error: str,
        attrs: dict[str, Any],
    ) -> None:
        """The Allocate's duration and (tracing on) its span in the pod's trace, or in a trace of its
        own when no pod was found. ``start``: (perf_counter, tracing.now_ns)."""
        attrs["k8s.node.name"] = self.node
        span = None
        if start[1]:  # only the bind's form joins: bound to this pod's UID
            span = tracing.pod_span(ALLOCATE_SPAN, pod or {}, start[1], attrs, bound_only=True)
        duration = time.perf_counter() - start[0]
        self._metrics.allocate_duration.labels(self.node, result).observe(duration, tracing.exemplar(span))
        tracing.end(span, error)

    def _allocate_for(
        self, pod: dict[str, Any], node_obj: dict[str, Any], requests: Sequence[Sequence[str]]
    ) -> list[pb.ContainerAllocateResponse]:
        who = object_key(pod)
        text = annotations_of(pod).get(ann.POD_DEVICES_TO_ALLOCATE, "")
        log.v(4).info("Allocate for pod %s: %s=%s", who, ann.POD_DEVICES_TO_ALLOCATE, text)
        if not text:
            raise decode_error("device request not found")
        try:
            pending = decode_to_allocate(text)
        except CodecError as exc:
            raise decode_error(str(exc)) from exc
        made: list[MigMade] = []
        try:
            return self._containers(pod, node_obj, requests, pending, made)
        except (AllocateError, MigPlanError) as exc:
            if made and self._mig is not None:
                self._mig.undo(made)  # nothing half-made: no pod will hold these
            if isinstance(exc, MigPlanError):
                raise AllocateError(exc.reason, exc.message) from exc
            raise

    def _mig_instances(
        self, pod: dict[str, Any], idx: int, devreq: ContainerDevices, allocations: list[MigAllocation]
    ) -> list[MigMade]:
        assert self._mig is not None
        try:
            offered = {d.uuid: self._mig.profiles(d.uuid) for d in devreq}
        except NvmlError as exc:
            raise AllocateError(MIG_CREATE_FAILED, f"cannot read the MIG profiles: {exc}") from exc
        return self._mig.create(plan(allocations, idx, devreq, offered, self._mig.allowed))

    def _containers(
        self,
        pod: dict[str, Any],
        node_obj: dict[str, Any],
        requests: Sequence[Sequence[str]],
        pending: PodDevices,
        made: list[MigMade],
    ) -> list[pb.ContainerAllocateResponse]:
        who = object_key(pod)
        mig_allocations: list[MigAllocation] = []
        if self._mig is not None:
            try:
                text = annotations_of(pod).get(ann.POD_MIG_ALLOCATIONS) or "[]"
                mig_allocations = decode_mig_allocations(text)
            except CodecError as exc:
                raise decode_error(str(exc)) from exc
        known = self._known_ids()
        responses: list[pb.ContainerAllocateResponse] = []
        for ids in requests:
            check_kubelet_ids(ids, known, self.cfg)
            if is_mig_request(ids):
                responses.append(to_pb(base_response(ids, self._opts, {}, str(uuid.uuid4()))))
                continue
            idx, devreq, pending = pop_next_container(pending)
            check_count(devreq, ids)
            if self.cfg.enable_get_preferred_allocation and self.cfg.operating_mode != MODE_MIG:
                devreq = align_to_kubelet(devreq, ids)
            check_annotated_devices(devreq, self._gpus())
            if log.v(5):
                for kubelet_id, dev in zip(ids, devreq, strict=True):
                    log.v(5).info(
                        "Allocate for pod %s: kubelet device %s is replica of GPU %s; the scheduler "
                        "chose GPU %s (%d MiB, %d%% cores)",
                        who,
                        kubelet_id,
                        physical_device_id(kubelet_id),
                        dev.uuid,
                        dev.usedmem,
                        dev.usedcores,
                    )
            opts = self._opts
            if self._mig is not None:
                now = self._mig_instances(pod, idx, devreq, mig_allocations)
                made += now
                devreq = tuple(replace(d, uuid=m.mig_uuid) for d, m in zip(devreq, now, strict=True))
                opts = replace(opts, id_strategy="uuid")  # a MIG device has no index of its own
            alloc = build_container_allocation(
                devreq,
                self.cfg,
                self._layout,
                pod_uid=uid_of(pod),
                container=container_of(pod, idx),
                cache_id=str(uuid.uuid4()),
                lib_host_path=self._lib_path(),
                license_present=os.path.exists(self._layout.license_path),
                opts=opts,
                gpus=self._gpus(),
            )
            if alloc.cache_dir is not None:
                self._prepare_host(alloc.cache_dir)
            if log.v(4):
                env_text = " ".join(f"{k}={v}" for k, v in sorted(alloc.envs.items()))
                mounts = ", ".join(f"{m.host_path}:{m.container_path}" for m in alloc.mounts)
                log.v(4).info(
                    "Allocate for pod %s container %s: %s; mounts %s",
                    who,
                    container_of(pod, idx).get("name", ""),
                    env_text,
                    mounts or "none",
                )
            responses.append(to_pb(alloc))
        erased = encode_pod_devices(pending)
        done = not has_pending_devices(erased)
        log.v(4).info(
            "Allocate for pod %s: %s=%s%s", who, ann.POD_DEVICES_TO_ALLOCATE, erased,
            f", {ann.POD_BIND_PHASE}={ann.BIND_PHASE_SUCCESS}" if done else "",
        )
        # The erase and, after the last container, bind-phase=success go in one patch. It also
        # sets the hami.io/vgpu-node label HAMi's filter patch sets (HAMi's vGPU monitor lists pods
        # by it): this scheduler writes no filter patch, and a Binding cannot carry labels.
        values: dict[str, str | None] = {ann.POD_DEVICES_TO_ALLOCATE: erased}
        if made:
            values[ann.POD_MIG_ALLOCATIONS] = encode_mig_allocations(fill(mig_allocations, made))
        if done:
            values[ann.POD_BIND_PHASE] = ann.BIND_PHASE_SUCCESS
        ns, name = namespace_of(pod), name_of(pod)
        labels = {ann.POD_VGPU_NODE: annotations_of(pod).get(ann.POD_VGPU_NODE, "")}
        try:
            self._written.record(pod, self._ops.patch_pod_annotations(ns, name, values, labels))
        except Exception as exc:
            raise AllocateError(POD_UPDATE_FAILED, f"failed to update pod annotation: {exc}") from exc
        if done:
            self._release_lock(ns, name, node_obj)
        return responses

    def preferred(self, requests: Sequence[PreferredRequest]) -> list[list[str] | None]:
        """GetPreferredAllocation never fails: containers it cannot place are omitted."""
        try:
            pod, _ = self.find_pending_pod()
            pending = decode_to_allocate(annotations_of(pod).get(ann.POD_DEVICES_TO_ALLOCATE, ""))
        except (AllocateError, CodecError) as exc:
            log.error("GetPreferredAllocation: %s", exc)
            return [None] * len(requests)
        return preferred_allocation(pending, requests)

    def _lib_path(self) -> str:
        versioned, plain = self._layout.lib_candidates(self._plugin_version)
        return versioned if os.path.exists(versioned) else plain

    def _prepare_host(self, cache_dir: str) -> None:
        try:
            shutil.rmtree(cache_dir, ignore_errors=True)
            os.makedirs(cache_dir, mode=0o777, exist_ok=True)
            os.chmod(cache_dir, 0o777)
            os.makedirs(self._layout.lock_dir, mode=0o777, exist_ok=True)
        except OSError as exc:
            raise AllocateError(HOST_PREPARE_FAILED, f"failed to get allocate response: {exc}") from exc

    def _mark_failed(self, pod: dict[str, Any], node_obj: dict[str, Any] | None) -> None:
        """PodAllocationFailed: bind-phase=failed, then release the node lock."""
        ns, name = namespace_of(pod), name_of(pod)
        values: dict[str, str | None] = {ann.POD_BIND_PHASE: ann.BIND_PHASE_FAILED}
        try:
            self._written.record(pod, self._ops.patch_pod_annotations(ns, name, values))
        except Exception as exc:
            log.error("failed to set bind phase failed on pod %s/%s: %s", ns, name, exc)
        self._release_lock(ns, name, node_obj)

    def _release_lock(self, ns: str, name: str, node_obj: dict[str, Any] | None) -> None:
        try:
            self._ops.release_node_lock(self.node, ns, name, node_obj)
        except Exception as exc:
            log.warning("failed to release node lock of %s for pod %s/%s: %s", self.node, ns, name, exc)
