"""One contract for every NVML backend: the fake always, the real library where NVML initialises."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hami.core.nvml import (
    CLOCK_EVENT_REASONS,
    EVENT_XID_CRITICAL,
    HEALTH_EVENTS,
    MEMORY_LIMIT_MAX,
    GpuInstanceProfile,
    Nvml,
    NvmlError,
    open_nvml,
)
from hami.core.nvml.api import TOPOLOGY_LEVELS
from hami.core.nvml.fake import FakeNvml
from hami.core.nvml.real import RealNvml


def _own_cgroup() -> str:
    """This process's cgroup v2 directory as NVML names cgroups (its full sysfs path)."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    rel = next((line[3:] for line in lines if line.startswith("0::")), "/")
    return os.path.normpath("/sys/fs/cgroup/" + rel.lstrip("/"))


OWN_CGROUP = _own_cgroup()
SPEC: dict[str, Any] = {
    "driver_version": "550.54.15",
    "cgroups": [OWN_CGROUP],
    "devices": [
        {
            "uuid": "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec",
            "name": "Tesla V100-PCIE-32GB",
            "memory_mib": 32768,
            "memory_used_mib": 1024,
            "numa": 0,
            "compute_capability": [7, 0],
            "utilization": {"gpu": 37, "memory": 12},
            "nvlinks": {1: 2},
            "temperature": 41,
            "power_mw": 53000,
            "processes": [{"pid": 4242, "used_mib": 1000}],
        },
        {
            "uuid": "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448",
            "name": "NVIDIA A100-SXM4-40GB",
            "memory_mib": 40960,
            "numa": 1,
            "nvlinks": {0: 2},
            "mig": {
                "enabled": True,
                "profiles": [
                    {"id": 19, "name": "1g.5gb", "slices": 1, "memory_mib": 4864,
                     "placements": [[s, 1] for s in range(7)]},
                    {"id": 14, "name": "2g.10gb", "slices": 2, "memory_mib": 9856,
                     "placements": [[0, 2], [2, 2], [4, 2]]},
                ],
                "instances": [
                    {
                        "uuid": "MIG-aaaa",
                        "profile": "1g.5gb",
                        "gpu_instance_id": 7,
                        "compute_instance_id": 0,
                        "memory_mib": 4864,
                    }
                ],
            },
        },
    ],
}
ABSENT_UUID = "GPU-00000000-0000-0000-0000-000000000000"


def _real() -> Nvml:
    try:
        return RealNvml()
    except NvmlError as exc:
        pytest.skip(f"real NVML does not initialise on this machine: {exc}")


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.gpu)])
def nvml(request: pytest.FixtureRequest) -> Iterator[Nvml]:
    session = FakeNvml(SPEC) if request.param == "fake" else _real()
    yield session
    session.close()


def _devices(nvml: Nvml) -> list[int]:
    n = nvml.device_count()
    assert n >= 0
    if n == 0:
        pytest.skip("no GPUs")
    return list(range(n))


def test_driver_versions(nvml: Nvml) -> None:
    assert nvml.driver_version().count(".") >= 1
    assert nvml.cuda_driver_version() >= 1000


def test_identity_and_lookup(nvml: Nvml) -> None:
    uuids = set()
    for i in _devices(nvml):
        dev = nvml.device(i)
        assert dev.index == i
        uuid = dev.uuid()
        assert uuid.startswith("GPU-")
        uuids.add(uuid)
        assert dev.name()
        assert nvml.device_by_uuid(uuid).index == i
        assert dev.pci_bus_id().count(":") == 2
        major, _minor = dev.cuda_compute_capability()
        assert major >= 3
        assert dev.minor_number() >= 0
    assert len(uuids) == nvml.device_count()


def test_bad_index_and_unknown_uuid(nvml: Nvml) -> None:
    for index in (nvml.device_count(), -1, 1 << 20):
        with pytest.raises(NvmlError) as info:
            nvml.device(index)
        assert (info.value.call, info.value.code) == ("nvmlDeviceGetHandleByIndex", "INVALID_ARGUMENT")
    with pytest.raises(NvmlError) as info:
        nvml.device_by_uuid(ABSENT_UUID)
    assert info.value.call == "nvmlDeviceGetHandleByUUID"
    assert info.value.code in ("NOT_FOUND", "INVALID_ARGUMENT")


def _or_unsupported(fn: Any) -> Any:
    try:
        return fn()
    except NvmlError as exc:
        assert exc.code == "NOT_SUPPORTED", exc
        return None


def test_monitor_readings(nvml: Nvml) -> None:
    for i in _devices(nvml):
        dev = nvml.device(i)
        mem = _or_unsupported(dev.memory_info)
        if mem is not None:
            assert mem.total > 0 and 0 <= mem.used <= mem.total and 0 <= mem.free <= mem.total
        util = _or_unsupported(dev.utilization_rates)
        if util is not None:
            assert 0 <= util.gpu <= 100 and 0 <= util.memory <= 100
        temp = _or_unsupported(dev.temperature)
        assert temp is None or 0 < temp < 130
        power = _or_unsupported(dev.power_usage)
        assert power is None or power >= 0
        for uncorrected in (False, True):
            ecc = _or_unsupported(functools.partial(dev.total_ecc_errors, uncorrected))
            assert ecc is None or ecc >= 0
        for proc in dev.compute_running_processes():
            assert proc.pid > 0 and (proc.used_memory is None or proc.used_memory >= 0)


def test_health_readings(nvml: Nvml) -> None:
    for i in _devices(nvml):
        dev = nvml.device(i)
        slowdown = _or_unsupported(lambda dev=dev: dev.temperature_threshold("slowdown"))
        shutdown = _or_unsupported(lambda dev=dev: dev.temperature_threshold("shutdown"))
        if slowdown is not None and shutdown is not None:
            assert 40 < slowdown <= shutdown < 150
        pages = _or_unsupported(dev.retired_pages)
        assert pages is None or (pages.single_bit >= 0 and pages.double_bit >= 0)
        rows = _or_unsupported(dev.remapped_rows)
        assert rows is None or (rows.correctable >= 0 and rows.uncorrectable >= 0)
        reasons = _or_unsupported(dev.clock_event_reasons)
        assert reasons is None or reasons & ~sum(CLOCK_EVENT_REASONS) == 0, f"unknown bits in {reasons:#x}"


def test_topology(nvml: Nvml) -> None:
    devices = [nvml.device(i) for i in _devices(nvml)]
    buses = {d.pci_bus_id().lower() for d in devices}
    for dev in devices:
        for remote in _or_unsupported(dev.nvlink_remotes) or []:
            assert remote.switch or remote.bus_id.lower() in buses, f"NVLink to an unknown GPU {remote}"
        for other in devices:
            if other.index != dev.index:
                level = _or_unsupported(lambda dev=dev, other=other: dev.topology_common_ancestor(other))
                assert level is None or level in TOPOLOGY_LEVELS
                back = _or_unsupported(lambda dev=dev, other=other: other.topology_common_ancestor(dev))
                assert level == back, "the PCIe common ancestor is the same both ways"


def test_mig_identity(nvml: Nvml) -> None:
    for i in _devices(nvml):
        dev = nvml.device(i)
        migs = dev.mig_devices()
        mode = _or_unsupported(dev.mig_mode)
        if mode is None or not mode[0]:
            assert migs == []
        for m in migs:
            assert m.uuid.startswith("MIG-") and m.gpu_instance_id >= 0 and m.compute_instance_id >= 0


def _partitionable(nvml: Nvml) -> tuple[Any, GpuInstanceProfile, tuple[int, int]]:
    """A MIG GPU, its smallest profile and a placement of it that no instance uses."""
    for i in _devices(nvml):
        dev = nvml.device(i)
        profiles = _or_unsupported(dev.gpu_instance_profiles)
        if not profiles:
            continue
        used = [(g.start, g.size) for g in dev.gpu_instances()]
        smallest = min(profiles, key=lambda p: p.slice_count)
        for start, size in smallest.placements:
            if all(start + size <= s or s + z <= start for s, z in used):
                return dev, smallest, (start, size)
    pytest.skip("no GPU in MIG mode with a free placement")


def test_mig_instances_are_created_and_destroyed(nvml: Nvml) -> None:
    dev, profile, (start, size) = _partitionable(nvml)
    assert profile.name and profile.memory_mib > 0 and profile.placements
    gi = dev.create_gpu_instance(profile.id, start, size)
    try:
        with pytest.raises(NvmlError) as info:  # the slices are taken now
            dev.create_gpu_instance(profile.id, start, size)
        assert info.value.code == "INSUFFICIENT_RESOURCES"
        ci = dev.create_compute_instance(gi)
        (made,) = [m for m in dev.mig_devices() if (m.gpu_instance_id, m.compute_instance_id) == (gi, ci)]
        assert made.uuid.startswith("MIG-")
        (listed,) = [g for g in dev.gpu_instances() if g.id == gi]
        assert (listed.profile_id, listed.start, listed.size, listed.compute_instances) == (
            profile.id, start, size, (ci,)
        )
        with pytest.raises(NvmlError) as info:  # not while a compute instance lives in it
            dev.destroy_gpu_instance(gi)
        assert info.value.code == "IN_USE"
        dev.destroy_compute_instance(gi, ci)
    finally:
        for g in dev.gpu_instances():
            if g.id == gi:
                for c in g.compute_instances:
                    dev.destroy_compute_instance(gi, c)
                dev.destroy_gpu_instance(gi)
    assert gi not in [g.id for g in dev.gpu_instances()]
    with pytest.raises(NvmlError) as info:
        dev.create_gpu_instance(profile.id, start, size + 99)  # not a placement of the profile
    assert info.value.code == "INVALID_ARGUMENT"


def test_event_set_times_out_with_none(nvml: Nvml) -> None:
    events = nvml.event_set()
    try:
        for i in _devices(nvml):
            dev = nvml.device(i)
            supported = _or_unsupported(dev.supported_event_types)
            if supported:
                events.register(dev, HEALTH_EVENTS & supported)
        got = events.wait(10)
        # An idle GPU has no Xid in 10 ms; any event that does come must be well formed.
        assert got is None or got.event_type & HEALTH_EVENTS
    finally:
        events.close()


def test_closed_session_answers_uninitialized(nvml: Nvml) -> None:
    n = nvml.device_count()
    dev = nvml.device(0) if n else None
    nvml.close()
    nvml.close()  # idempotent
    with pytest.raises(NvmlError) as info:
        nvml.device_count()
    assert (info.value.call, info.value.code) == ("nvmlDeviceGetCount", "UNINITIALIZED")
    if dev is not None:
        with pytest.raises(NvmlError) as info:
            dev.uuid()
        assert (info.value.call, info.value.code) == ("nvmlDeviceGetUUID", "UNINITIALIZED")


def test_xid_registration_on_a_supporting_device(nvml: Nvml) -> None:
    dev = nvml.device(_devices(nvml)[0])
    supported = _or_unsupported(dev.supported_event_types)
    if supported is None or supported & EVENT_XID_CRITICAL == 0:
        pytest.skip("device reports no Xid events")
    events = nvml.event_set()
    try:
        events.register(dev, EVENT_XID_CRITICAL)
    finally:
        events.close()


# ---- what runs on every machine ----


def test_real_backend_without_driver_fails_at_init() -> None:
    try:
        session = open_nvml("real")
    except NvmlError as exc:
        assert exc.call == "nvmlInit"
        assert exc.code in ("LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED", "NO_PERMISSION", "UNKNOWN")
        assert str(exc).startswith(f"nvmlInit failed: {exc.code}")
        assert "NVIDIA driver" in str(exc)
    else:
        session.close()
        pytest.skip("NVML initialises here: this machine has a driver")


def test_open_nvml_selects_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "node.yaml"
    spec.write_text("devices:\n  - {uuid: GPU-x, name: Tesla T4, memory_mib: 15360}\n", encoding="utf-8")
    monkeypatch.setenv("HAMI_NVML", "fake")
    monkeypatch.setenv("HAMI_FAKE_NVML_SPEC", str(spec))
    with open_nvml() as nvml:
        assert isinstance(nvml, FakeNvml)
        assert nvml.device(0).name() == "Tesla T4"
        assert nvml.device(0).memory_info().total == 15360 << 20
    monkeypatch.delenv("HAMI_FAKE_NVML_SPEC")
    with pytest.raises(ValueError, match="HAMI_FAKE_NVML_SPEC"):
        open_nvml()
    with open_nvml("fake", spec) as nvml:
        assert nvml.device_count() == 1
    monkeypatch.setenv("HAMI_NVML", "bogus")
    with pytest.raises(ValueError, match="HAMI_NVML"):
        open_nvml()
    monkeypatch.setenv("HAMI_NVML", "real")
    try:
        open_nvml().close()
    except NvmlError as exc:
        assert exc.call == "nvmlInit"


def test_cgroup_memory_limits(nvml: Nvml) -> None:
    """nvmlDeviceGetMemoryLimits_v1 on this process's cgroup, where nobody set a limit: soft 0 and hard
    NVML_DEVICE_MEMORY_LIMIT_MAX; NOT_SUPPORTED on MIG; a driver without the call says so by name."""
    answered = 0
    for i in _devices(nvml):
        dev = nvml.device(i)
        try:
            limits = dev.memory_limits(OWN_CGROUP)
        except NvmlError as exc:
            assert exc.call == "nvmlDeviceGetMemoryLimits_v1"
            assert exc.code in ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND"), exc
            if exc.code == "NOT_SUPPORTED" and isinstance(nvml, FakeNvml):
                assert _or_unsupported(dev.mig_mode)[0], "the fake refuses MIG GPUs only"
            continue
        answered += 1
        assert (limits.soft, limits.hard) == (0, MEMORY_LIMIT_MAX) and not limits.limited
        assert limits.used >= 0
        with pytest.raises(NvmlError) as info:
            dev.memory_limits("not/a/sysfs/path")
        assert info.value.call == "nvmlDeviceGetMemoryLimits_v1"  # which code is the driver's own
    if isinstance(nvml, FakeNvml):
        assert answered == 1  # the V100; the A100 runs MIG


def test_cgroup_memory_limits_set_read_back_and_clear(nvml: Nvml) -> None:
    """nvmlDeviceSetMemoryLimits_v1 on this process's cgroup (the toolkit hook's call): what is set reads
    back from nvmlDeviceGetMemoryLimits_v1, soft above hard is refused before the driver is asked, and
    (0, NVML_DEVICE_MEMORY_LIMIT_MAX) clears them; each GPU is left cleared, as this test found it."""
    answered = 0
    for i in _devices(nvml):
        dev = nvml.device(i)
        # the whole card: a limit this process's own allocations (none) cannot reach
        hard = _or_unsupported(dev.memory_info)
        hard = hard.total if hard is not None else 1 << 30
        soft = hard // 2
        try:
            dev.set_memory_limits(OWN_CGROUP, soft, hard)
        except NvmlError as exc:
            assert exc.call == "nvmlDeviceSetMemoryLimits_v1"
            assert exc.code in ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND"), exc
            if exc.code == "NOT_SUPPORTED" and isinstance(nvml, FakeNvml):
                assert _or_unsupported(dev.mig_mode)[0], "the fake refuses MIG GPUs only"
            continue
        answered += 1
        try:
            got = dev.memory_limits(OWN_CGROUP)
            assert (got.soft, got.hard, got.limited) == (soft, hard, True)
            with pytest.raises(NvmlError) as info:
                dev.set_memory_limits(OWN_CGROUP, hard, soft)
            assert (info.value.call, info.value.code) == ("nvmlDeviceSetMemoryLimits_v1", "INVALID_ARGUMENT")
        finally:
            dev.set_memory_limits(OWN_CGROUP, 0, MEMORY_LIMIT_MAX)
        cleared = dev.memory_limits(OWN_CGROUP)
        assert (cleared.soft, cleared.hard, cleared.limited) == (0, MEMORY_LIMIT_MAX, False)
    if isinstance(nvml, FakeNvml):
        assert answered == 1  # the V100; the A100 runs MIG
