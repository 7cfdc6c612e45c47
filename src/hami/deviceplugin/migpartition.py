"""Creating and destroying MIG instances on the cards, under the MIG apply lock (§C.8).

While it repartitions, the plugin holds ``/tmp/hami/hami-mig-apply.lock`` (HAMi's file), which pauses
the monitor's feedback loop and the plugin's own health checks and registration; when someone else
holds it, an Allocate waits a moment and then fails with a clear error instead of racing them. What
one Allocate created is destroyed again when a later step of it fails, so no instance is left
half-made. Instances no live pod holds are destroyed by ``reconcile``, at start (after a plugin
restart) and every few seconds, except those created in the last ``grace_s`` (their pod annotation may
not have reached the informer yet).

Section signs (§) refer to docs/design/node-agent-device-plugin.md.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from hami.core import klog
from hami.core.nvml import GpuInstanceInfo, GpuInstanceProfile, Nvml, NvmlError
from hami.deviceplugin.migplan import (
    MIG_CREATE_FAILED,
    MIG_LOCK_HELD,
    MigMade,
    MigPlanError,
    MigStep,
    orphans,
)

log = klog.get_logger(__name__)


class MigPartitioner:
    def __init__(
        self,
        nvml: Nvml,
        lock_path: Path,
        allowed: Mapping[str, frozenset[str] | None],
        *,
        lock_wait_s: float = 10.0,
        grace_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nvml = nvml
        self._lock_path = lock_path
        self.allowed = allowed  # per GPU UUID: the allowlisted profile names, None for all
        self._lock_wait_s = lock_wait_s
        self._grace_s = grace_s
        self._clock = clock
        self._mutex = threading.Lock()  # one repartition at a time in this process
        self._recent: dict[tuple[str, int], float] = {}
        self._profiles: dict[str, list[GpuInstanceProfile]] = {}

    def profiles(self, uuid: str) -> list[GpuInstanceProfile]:
        """The card's GPU-instance profiles (they do not change while MIG mode is on)."""
        if uuid not in self._profiles:
            self._profiles[uuid] = self._nvml.device_by_uuid(uuid).gpu_instance_profiles()
        return self._profiles[uuid]

    @contextlib.contextmanager
    def _applying(self) -> Iterator[None]:
        with self._mutex:
            deadline = self._clock() + self._lock_wait_s
            while True:
                try:
                    self._lock_path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                    fd = os.open(self._lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                    break
                except FileExistsError:
                    if self._clock() >= deadline:
                        raise MigPlanError(
                            MIG_LOCK_HELD,
                            f"the MIG apply lock {self._lock_path} is held by another repartition; "
                            "retry once it is gone (delete it only if nothing is repartitioning)",
                        ) from None
                    time.sleep(0.05)
            os.close(fd)
            try:
                yield
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._lock_path)

    def create(self, steps: Sequence[MigStep]) -> list[MigMade]:
        """Create every step's GPU and compute instance, or none of them (``MigPlanError``)."""
        made: list[MigMade] = []
        with self._applying():
            for step in steps:
                dev = self._nvml.device_by_uuid(step.gpu_uuid)
                gi: int | None = None
                try:
                    gi = dev.create_gpu_instance(step.profile.id, step.start, step.size)
                    ci = dev.create_compute_instance(gi)
                    uuid = next(
                        m.uuid
                        for m in dev.mig_devices()
                        if (m.gpu_instance_id, m.compute_instance_id) == (gi, ci)
                    )
                except (NvmlError, StopIteration) as exc:
                    if gi is not None:
                        self._destroy(step.gpu_uuid, gi, ())
                    self._undo(made)
                    raise MigPlanError(
                        MIG_CREATE_FAILED,
                        f"failed to create MIG instance {step.profile.name} at start={step.start} "
                        f"size={step.size} on {step.gpu_uuid}: {exc or 'its MIG device did not appear'}",
                    ) from exc
                made.append(MigMade(step, uuid, gi, ci))
                self._recent[(step.gpu_uuid, gi)] = self._clock()
                log.info(
                    "Created MIG instance %s (GI %d, CI %d) %s at %d+%d on %s",
                    uuid, gi, ci, step.profile.name, step.start, step.size, step.gpu_uuid,
                )  # fmt: skip
        return made

    def undo(self, made: Sequence[MigMade]) -> None:
        """Destroy what ``create`` made, after a later failure of the same Allocate."""
        with self._applying():
            self._undo(made)

    def _undo(self, made: Sequence[MigMade]) -> None:
        for m in made:
            self._destroy(m.step.gpu_uuid, m.gpu_instance_id, (m.compute_instance_id,))
            self._recent.pop((m.step.gpu_uuid, m.gpu_instance_id), None)

    def _destroy(self, uuid: str, gi: int, cis: Sequence[int]) -> None:
        dev = self._nvml.device_by_uuid(uuid)
        try:
            for ci in cis:
                dev.destroy_compute_instance(gi, ci)
            dev.destroy_gpu_instance(gi)
        except NvmlError as exc:
            log.error("failed to destroy MIG GPU instance %d on %s: %s", gi, uuid, exc)

    def reconcile(self, gpus: Sequence[str], live: set[tuple[str, int]]) -> list[tuple[str, GpuInstanceInfo]]:
        """Destroy the instances on ``gpus`` no live pod holds; returns what it destroyed."""
        instances = {}
        for uuid in gpus:
            try:
                instances[uuid] = self._nvml.device_by_uuid(uuid).gpu_instances()
            except NvmlError as exc:
                log.error("cannot list the MIG instances of %s: %s", uuid, exc)
        # After the listing: a create in progress finishes (and is recorded) before this snapshot.
        with self._mutex:
            now = self._clock()
            self._recent = {k: t for k, t in self._recent.items() if now - t < self._grace_s}
            recent = set(self._recent)
        gone = [(u, gi) for u, gi in orphans(instances, live) if (u, gi.id) not in recent]
        if not gone:
            return []
        try:
            with self._applying():
                for uuid, gi in gone:
                    log.info(
                        "Destroying MIG GPU instance %d on %s: no pod on this node holds it", gi.id, uuid
                    )
                    self._destroy(uuid, gi.id, gi.compute_instances)
        except MigPlanError as exc:
            log.info("MIG cleanup postponed: %s", exc.message)
            return []
        return gone


class MigReconciler:
    """Every ``interval`` s, destroys the instances on ``gpus`` that no live pod holds.

    ``live`` returns None while the pod cache is not synced: then nothing is judged.
    """

    def __init__(
        self,
        partitioner: MigPartitioner,
        gpus: Sequence[str],
        live: Callable[[], set[tuple[str, int]] | None],
        interval: float = 5.0,
    ) -> None:
        self._partitioner = partitioner
        self._gpus = list(gpus)
        self._live = live
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mig-reconcile", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def pass_once(self) -> list[tuple[str, GpuInstanceInfo]]:
        live = self._live()
        return [] if live is None else self._partitioner.reconcile(self._gpus, live)

    def _run(self) -> None:
        while True:
            try:
                self.pass_once()
            except Exception:  # the loop must outlive one bad pass
                log.error("MIG reconcile pass failed", exc_info=True)
            if self._stop.wait(self._interval):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
