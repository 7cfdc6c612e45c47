"""FakeNvml beyond the contract: error injection, Xid events, simulator controls, spec checking;
and RealNvml's own bookkeeping (init once, errors mapped) over a stand-in pynvml."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pynvml
import pytest

from hami.core.nvml import (
    EVENT_DOUBLE_BIT_ECC,
    EVENT_XID_CRITICAL,
    HEALTH_EVENTS,
    MEMORY_LIMIT_MAX,
    NO_INSTANCE,
    NvmlError,
)
from hami.core.nvml.fake import FakeNvml
from hami.core.nvml.fake_spec import FakeSpecError
from hami.core.nvml.real import RealNvml

SPEC: dict[str, Any] = {
    "devices": [
        {"uuid": "GPU-a", "name": "Tesla T4", "memory_mib": 15360},
        {
            "uuid": "GPU-b",
            "name": "Tesla T4",
            "memory_mib": 15360,
            "unsupported": ["nvmlDeviceGetPowerUsage"],
            "supported_events": EVENT_XID_CRITICAL,
        },
    ]
}


@pytest.fixture
def fake() -> FakeNvml:
    return FakeNvml(SPEC)


def test_fail_per_call_and_device(fake: FakeNvml) -> None:
    fake.fail(call="nvmlDeviceGetTemperature", device=1, code="NOT_SUPPORTED")
    assert fake.device(0).temperature() == 35
    for _ in range(3):
        with pytest.raises(NvmlError) as info:
            fake.device(1).temperature()
        assert (info.value.call, info.value.code) == ("nvmlDeviceGetTemperature", "NOT_SUPPORTED")
    assert fake.device(1).memory_info().total == 15360 << 20  # other calls unaffected
    fake.clear_failures()
    assert fake.device(1).temperature() == 35


def test_fail_a_number_of_times_on_every_device(fake: FakeNvml) -> None:
    fake.fail(call="nvmlDeviceGetMemoryInfo", code="GPU_IS_LOST", times=2)
    with pytest.raises(NvmlError, match="GPU_IS_LOST"):
        fake.device(1).memory_info()
    with pytest.raises(NvmlError, match="GPU_IS_LOST"):
        fake.device(0).memory_info()
    assert fake.device(0).memory_info().used == 0
    fake.fail(call="nvmlDeviceGetCount", code=15)
    with pytest.raises(NvmlError) as info:
        fake.device_count()
    assert info.value.code == "GPU_IS_LOST"  # numeric codes are named like the real backend's
    with pytest.raises(ValueError, match="unknown NVML return code"):
        fake.fail(call="nvmlDeviceGetCount", code="NOPE")


def test_unsupported_calls_from_spec(fake: FakeNvml) -> None:
    assert fake.device(0).power_usage() == 60000
    with pytest.raises(NvmlError) as info:
        fake.device(1).power_usage()
    assert info.value.code == "NOT_SUPPORTED"
    with pytest.raises(NvmlError) as info:
        fake.device(0).mig_mode()  # not a MIG-capable GPU
    assert (info.value.call, info.value.code) == ("nvmlDeviceGetMigMode", "NOT_SUPPORTED")
    assert fake.device(0).mig_devices() == []


def test_xid_events_reach_registered_sets_only(fake: FakeNvml) -> None:
    es = fake.event_set()
    es.register(fake.device(0), HEALTH_EVENTS)
    fake.inject_xid(1, 79)  # device 1 not registered
    assert es.wait(0) is None
    fake.inject_xid(0, 31)
    fake.inject_event(0, EVENT_DOUBLE_BIT_ECC, 0)
    fake.inject_xid(0, 48, gi=3, ci=0)
    got = [es.wait(0), es.wait(0), es.wait(0), es.wait(0)]
    assert [(e.device_uuid, e.event_type, e.xid) for e in got if e] == [
        ("GPU-a", EVENT_XID_CRITICAL, 31),
        ("GPU-a", EVENT_DOUBLE_BIT_ECC, 0),
        ("GPU-a", EVENT_XID_CRITICAL, 48),
    ]
    assert got[0] is not None and got[0].gpu_instance_id == NO_INSTANCE
    assert got[2] is not None and (got[2].gpu_instance_id, got[2].compute_instance_id) == (3, 0)
    assert got[3] is None
    es.close()


def test_registering_unsupported_event_types_is_refused(fake: FakeNvml) -> None:
    es = fake.event_set()
    with pytest.raises(NvmlError) as info:
        es.register(fake.device(1), HEALTH_EVENTS)
    assert (info.value.call, info.value.code) == ("nvmlDeviceRegisterEvents", "NOT_SUPPORTED")
    es.register(fake.device(1), HEALTH_EVENTS & fake.device(1).supported_event_types())


def test_wait_wakes_on_an_event_from_another_thread(fake: FakeNvml) -> None:
    es = fake.event_set()
    es.register(fake.device(1), EVENT_XID_CRITICAL)
    registered = threading.Event()
    got: list[Any] = []

    def waiter() -> None:
        registered.set()
        got.append(es.wait(60_000))

    t = threading.Thread(target=waiter)
    t.start()
    assert registered.wait(10)
    fake.inject_xid(1, 79)
    t.join(30)
    assert not t.is_alive()
    assert got[0].xid == 79 and got[0].device_uuid == "GPU-b"


def test_wait_errors_and_close_wakes_waiters(fake: FakeNvml) -> None:
    es = fake.event_set()
    fake.fail(call="nvmlEventSetWait", code="UNKNOWN", times=1)
    with pytest.raises(NvmlError, match="nvmlEventSetWait failed: UNKNOWN"):
        es.wait(0)
    errors: list[NvmlError] = []

    def waiter() -> None:
        try:
            es.wait(60_000)
        except NvmlError as exc:
            errors.append(exc)

    t = threading.Thread(target=waiter)
    t.start()
    fake.close()
    t.join(30)
    assert not t.is_alive()
    assert errors and errors[0].code == "UNINITIALIZED"


def test_simulator_controls(fake: FakeNvml) -> None:
    fake.update(
        0, utilization_gpu=80, utilization_memory=20, memory_used=1 << 30, temperature=77, ecc_uncorrected=2
    )
    fake.set_processes(0, [(100, 1 << 30), (101, None)])
    dev = fake.device(0)
    assert (dev.utilization_rates().gpu, dev.utilization_rates().memory) == (80, 20)
    mem = dev.memory_info()
    assert (mem.used, mem.free) == (1 << 30, (15360 << 20) - (1 << 30))
    assert dev.temperature() == 77 and dev.total_ecc_errors(uncorrected=True) == 2
    assert [(p.pid, p.used_memory) for p in dev.compute_running_processes()] == [(100, 1 << 30), (101, None)]
    with pytest.raises(ValueError, match="memory_used"):
        fake.update(0, memory_used=1 << 50)
    with pytest.raises(ValueError, match="utilization"):
        fake.update(0, utilization_gpu=101)
    with pytest.raises(ValueError, match="unknown fake GPU fields"):
        fake.update(0, fan=3)


def test_health_conditions_and_a_lost_gpu() -> None:
    fake = FakeNvml(
        {
            "devices": [
                {
                    "uuid": "GPU-a",
                    "memory_mib": 1,
                    "temperature_thresholds": {"slowdown": 87, "shutdown": 92},
                    "retired_pages": {"single_bit": 2, "double_bit": 1, "pending": True},
                    "remapped_rows": {"correctable": 4, "uncorrectable": 0, "failure": True},
                    "clock_event_reasons": 0x40,
                }
            ]
        }
    )
    dev = fake.device(0)
    assert (dev.temperature_threshold("slowdown"), dev.temperature_threshold("shutdown")) == (87, 92)
    assert (dev.retired_pages().double_bit, dev.retired_pages().pending) == (1, True)
    assert (dev.remapped_rows().correctable, dev.remapped_rows().failure) == (4, True)
    assert dev.clock_event_reasons() == 0x40
    with pytest.raises(NvmlError, match="INVALID_ARGUMENT"):
        dev.temperature_threshold("acoustic")
    fake.update(0, lost=True)  # fallen off the bus: the handle and a new lookup both say so
    for call in (dev.temperature, dev.uuid, lambda: fake.device_by_uuid("GPU-a")):
        with pytest.raises(NvmlError) as info:
            call()
        assert info.value.code == "GPU_IS_LOST"
    fake.update(0, lost=False)
    assert fake.device_by_uuid("GPU-a").temperature() == 35


def test_mig_instances_and_call_counts() -> None:
    spec = {
        "devices": [
            {
                "uuid": "GPU-m",
                "memory_mib": 40960,
                "mig": {
                    "enabled": True,
                    "instances": [
                        {
                            "uuid": "MIG-1",
                            "profile": "3g.20gb",
                            "gpu_instance_id": 2,
                            "compute_instance_id": 0,
                            "memory_mib": 19968,
                        },
                    ],
                },
            }
        ]
    }
    fake = FakeNvml(spec)
    dev = fake.device(0)
    assert dev.mig_mode() == (True, True)
    (mig,) = dev.mig_devices()
    assert (mig.uuid, mig.gpu_instance_id, mig.compute_instance_id, mig.memory.total) == (
        "MIG-1",
        2,
        0,
        19968 << 20,
    )
    assert mig.name.endswith("MIG 3g.20gb")
    assert fake.calls["nvmlDeviceGetGpuInstanceId"] == 1
    fake.update(0, mig_enabled=False)
    assert dev.mig_devices() == []


def test_init_error_and_yaml_spec(tmp_path: Path) -> None:
    with pytest.raises(NvmlError) as info:
        FakeNvml({"init_error": "DRIVER_NOT_LOADED", "devices": []})
    assert (info.value.call, info.value.code) == ("nvmlInit", "DRIVER_NOT_LOADED")
    path = tmp_path / "n.yaml"
    path.write_text("devices:\n  - {uuid: GPU-y, memory_bytes: 1024, numa: 1}\n", encoding="utf-8")
    assert FakeNvml(path).device(0).numa_node_id() == 1


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ([], "must be a mapping"),
        ({"devices": [{"uuid": "a"}]}, r"devices\[0\]: memory_mib or memory_bytes"),
        ({"devices": [{"memory_mib": "lots"}]}, r"devices\[0\]\.memory_mib"),
        ({"devices": [{"memory_mib": 1, "memory_used_mib": 2}]}, "outside"),
        ({"devices": [{"uuid": "a", "memory_mib": 1}, {"uuid": "a", "memory_mib": 1}]}, "duplicate uuid"),
        ({"devices": [{"memory_mib": 1, "processes": [3]}]}, r"processes\[0\]"),
        ({"init_error": "BROKEN"}, "init_error"),
        ({"devices": [{"memory_mib": 1}], "events": [{"device": 1, "xid": 79}]}, r"events\[0\]\.device"),
        ({"devices": [{"memory_mib": 1}], "events": [{"device": 0}]}, r"events\[0\]\.xid"),
        ({"devices": [{"memory_mib": 1}], "events": [{"device": 0, "xid": 79, "every_seconds": 0}]}, "every"),
        ({"devices": [{"memory_mib": 1}], "events": ["soon"]}, r"events\[0\]: expected a mapping"),
        ({"devices": [{"memory_mib": 1, "retired_pages": {"pending": 1}}]}, r"retired_pages\.pending"),
        ({"devices": [{"memory_mib": 1, "temperature_thresholds": 90}]}, "temperature_thresholds"),
        ({"devices": [{"memory_mib": 1, "nvlinks": {0: 1}}]}, r"devices\[0\]\.nvlinks: peer 0"),
        ({"devices": [{"memory_mib": 1, "nvlinks": {"x": 1}}]}, r"devices\[0\]\.nvlinks: want"),
        ({"devices": [{"memory_mib": 1, "mig": {"instances": [{"placement": [0, 1]}]}}]}, "placed instance"),
        ({"devices": [{"memory_mib": 1, "mig": {"profiles": [{"placements": [0, 1]}]}}]}, r"profiles\[0\]"),
    ],
)
def test_spec_errors_name_the_key(spec: Any, message: str) -> None:
    with pytest.raises(FakeSpecError, match=message):
        FakeNvml(spec)


def test_scheduled_events_from_the_spec_drive_a_fake_held_elsewhere(tmp_path: Path) -> None:
    """A process holding the fake (the device plugin) gets Xids from its spec file, on a schedule."""
    path = tmp_path / "node.yaml"
    path.write_text(
        "devices:\n  - {uuid: GPU-a, memory_mib: 1}\n  - {uuid: GPU-b, memory_mib: 1}\n"
        "events:\n  - {after_seconds: 0, device: 1, xid: 79, every_seconds: 0.05}\n"
        "  - {after_seconds: 0, device: 0, xid: 48}\n"
    , encoding="utf-8")
    nvml = FakeNvml(path)
    events = nvml.event_set()
    events.register(nvml.device(1), EVENT_XID_CRITICAL)  # GPU-a is not registered: its Xid is not seen
    got = []
    while len(got) < 3:  # the repeat delivers again and again; a bounded wait each time
        ev = events.wait(30_000)
        assert ev is not None, "no scheduled event within 30 s"
        got.append((ev.device_uuid, ev.event_type, ev.xid))
    assert got == [("GPU-b", EVENT_XID_CRITICAL, 79)] * 3
    nvml.close()
    assert nvml._scheduler is not None and not nvml._scheduler.is_alive()


# ---- RealNvml bookkeeping, over a stand-in library (there is no driver on CI machines) ----


class _StandIn:
    def __init__(self) -> None:
        self.inits = 0
        self.shutdowns = 0

    def init(self) -> None:
        self.inits += 1

    def shutdown(self) -> None:
        self.shutdowns += 1


def test_real_inits_once_and_maps_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = _StandIn()
    monkeypatch.setattr(pynvml, "nvmlInit", lib.init)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lib.shutdown)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 2)

    def bad_index(index: int) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", bad_index)
    nvml = RealNvml()
    for _ in range(5):
        assert nvml.device_count() == 2
    with pytest.raises(NvmlError) as info:
        nvml.device(7)
    assert (info.value.call, info.value.code) == ("nvmlDeviceGetHandleByIndex", "INVALID_ARGUMENT")
    nvml.close()
    nvml.close()
    assert (lib.inits, lib.shutdowns) == (1, 1)
    with pytest.raises(NvmlError, match="UNINITIALIZED"):
        nvml.device_count()


CG = "/sys/fs/cgroup/kubepods.slice/pod-a/ctr-1"


def test_cgroup_memory_limits_set_get_clear_and_vanish() -> None:
    fake = FakeNvml({"devices": [{"memory_mib": 8192}], "cgroups": [CG]})
    dev = fake.device(0)
    assert (dev.memory_limits(CG).soft, dev.memory_limits(CG).hard) == (0, MEMORY_LIMIT_MAX)
    dev.set_memory_limits(CG, 1 << 30, 2 << 30)
    fake.set_cgroup_usage(0, CG, 512 << 20)
    got = dev.memory_limits(CG)
    assert (got.soft, got.hard, got.used, got.limited) == (1 << 30, 2 << 30, 512 << 20, True)
    for soft, hard in ((3 << 30, 2 << 30), (-1, 1 << 30), (0, MEMORY_LIMIT_MAX + 1)):
        with pytest.raises(NvmlError) as info:
            dev.set_memory_limits(CG, soft, hard)
        assert (info.value.call, info.value.code) == ("nvmlDeviceSetMemoryLimits_v1", "INVALID_ARGUMENT")
    dev.set_memory_limits(CG, 0, MEMORY_LIMIT_MAX)  # the documented way to clear them
    cleared = dev.memory_limits(CG)
    assert not cleared.limited and cleared.used == 512 << 20
    fake.remove_cgroup(CG)
    with pytest.raises(NvmlError) as info:
        dev.memory_limits(CG)
    assert info.value.code == "NOT_FOUND"


def test_cgroup_memory_limits_mig_and_old_driver() -> None:
    mig = {"memory_mib": 40960, "mig": {"enabled": True}, "cgroup_memory": {CG: {"hard_mib": 1024}}}
    fake = FakeNvml({"devices": [mig]})
    with pytest.raises(NvmlError) as info:
        fake.device(0).memory_limits(CG)
    assert (info.value.call, info.value.code) == ("nvmlDeviceGetMemoryLimits_v1", "NOT_SUPPORTED")
    old = FakeNvml({"memory_limits": False, "devices": [{"memory_mib": 1024}], "cgroups": [CG]})
    with pytest.raises(NvmlError) as info:
        old.device(0).memory_limits(CG)
    assert info.value.code == "FUNCTION_NOT_FOUND"
    with pytest.raises(NvmlError) as info:
        old.device(0).set_memory_limits(CG, 0, 1)
    assert info.value.code == "FUNCTION_NOT_FOUND"
    with pytest.raises(FakeSpecError, match="soft <= hard"):
        FakeNvml({"devices": [{"memory_mib": 1, "cgroup_memory": {CG: {"soft_mib": 2, "hard_mib": 1}}}]})


def test_real_memory_limits_through_the_library_symbol_when_the_binding_lacks_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An nvidia-ml-py before the call: the documented struct goes to the library's symbol by ctypes;
    a driver without the symbol answers FUNCTION_NOT_FOUND by name."""
    lib = _StandIn()
    monkeypatch.setattr(pynvml, "nvmlInit", lib.init)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lib.shutdown)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda index: object())
    for name in ("nvmlDeviceGetMemoryLimits_v1", "c_nvmlGetMemoryLimits_v1_t"):
        monkeypatch.delattr(pynvml, name, raising=False)
    seen: list[bytes] = []

    def symbol(name: str) -> Any:
        if name != "nvmlDeviceGetMemoryLimits_v1":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

        def call(handle: Any, ref: Any) -> int:
            limits = ref._obj  # the structure behind ctypes.byref
            seen.append(limits.nameSpace)
            limits.softLimit, limits.hardLimit, limits.currentUsed = 0, MEMORY_LIMIT_MAX, 123
            return 0

        return call

    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", symbol)
    nvml = RealNvml()
    got = nvml.device(0).memory_limits(CG)
    assert (got.soft, got.hard, got.used, got.limited) == (0, MEMORY_LIMIT_MAX, 123, False)
    assert seen == [CG.encode()]
    monkeypatch.delattr(pynvml, "nvmlDeviceSetMemoryLimits_v1", raising=False)
    with pytest.raises(NvmlError) as info:
        nvml.device(0).set_memory_limits(CG, 0, 1 << 30)
    assert (info.value.call, info.value.code) == ("nvmlDeviceSetMemoryLimits_v1", "FUNCTION_NOT_FOUND")
    nvml.close()
