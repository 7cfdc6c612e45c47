"""The NVML edge on FakeNvml: discovery facts and every branch of the health loop."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hami.core.nvml import EVENT_DOUBLE_BIT_ECC, NvmlError
from hami.core.nvml.fake import FakeNvml
from hami.deviceplugin.health import CHECKS, HealthState, XidPolicy
from hami.deviceplugin.nvml_source import HealthChecker, read_gpu_facts
from hami.testing.pluginrig import NVML_SPEC, U0, U1
from hami.testing.wait import wait_until


def _spec(**dev0: Any) -> dict[str, Any]:
    spec = copy.deepcopy(NVML_SPEC)
    spec["devices"][0].update(dev0)
    return spec


def test_facts_from_nvml() -> None:
    facts = read_gpu_facts(FakeNvml(NVML_SPEC))
    assert [(f.uuid, f.index, f.name, f.memory_total, f.numa) for f in facts] == [
        (U0, 0, "Tesla V100-PCIE-32GB", 32768 << 20, 0),
        (U1, 1, "NVIDIA A100-SXM4-40GB", 40960 << 20, 1),
    ]


def test_memory_not_supported_is_none_and_other_errors_raise(caplog: pytest.LogCaptureFixture) -> None:
    facts = read_gpu_facts(FakeNvml(_spec(unsupported=["nvmlDeviceGetMemoryInfo"])))
    assert facts[0].memory_total is None and facts[1].memory_total == 40960 << 20
    assert "GetMemoryInfo not supported" in caplog.text
    nvml = FakeNvml(NVML_SPEC)
    nvml.fail("nvmlDeviceGetMemoryInfo", device=1, code="GPU_IS_LOST")
    with pytest.raises(NvmlError):
        read_gpu_facts(nvml)
    assert "nvml get memory error" in caplog.text
    nvml.fail("nvmlDeviceGetCount", code="UNKNOWN")
    with pytest.raises(NvmlError):
        read_gpu_facts(nvml)
    assert "nvml GetDeviceCount err" in caplog.text


def test_numa_falls_back_to_sysfs(tmp_path: Path) -> None:
    nvml = FakeNvml(NVML_SPEC)
    nvml.fail("nvmlDeviceGetNumaNodeId", code="NOT_SUPPORTED")
    bus = nvml.device(1).pci_bus_id()
    node_dir = tmp_path / "bus" / "pci" / "devices" / bus[4:].lower()
    node_dir.mkdir(parents=True)
    (node_dir / "numa_node").write_text("3\n", encoding="utf-8")  # NVML would have said 1
    assert [f.numa for f in read_gpu_facts(nvml, tmp_path)] == [0, 3]


class Checked:
    def __init__(
        self, nvml: FakeNvml, policy: XidPolicy, lock: Path, checks: frozenset[str] = frozenset()
    ) -> None:
        self.state = HealthState([U0, U1])
        self.events: list[tuple[str, str]] = []
        self.checker = HealthChecker(
            nvml,
            [U0, U1],
            policy,
            checks=checks,
            on_condition=self.state.set_reason,
            on_event=lambda uuid, event: self.events.append((uuid, event)),
            paused=lock.exists,
            wait_ms=20,
            poll_s=0.02,
        )

    def healthy(self) -> dict[str, bool]:
        return self.state.snapshot()[1]


@pytest.fixture
def nvml() -> Iterator[FakeNvml]:
    fake = FakeNvml(NVML_SPEC)
    yield fake
    fake.close()


def test_registration_outcomes(nvml: FakeNvml, tmp_path: Path) -> None:
    nvml.fail("nvmlDeviceRegisterEvents", device=0, code="NOT_SUPPORTED")
    nvml.fail("nvmlDeviceRegisterEvents", device=1, code="UNKNOWN")
    c = Checked(nvml, XidPolicy(), tmp_path / "lock")
    c.checker.start()
    try:
        wait_until(lambda: (U1, "registration_failed") in c.events, what="registration failure")
        assert (U0, "not_supported") in c.events
        assert c.healthy() == {U0: True, U1: False}
    finally:
        c.checker.stop()


def test_event_kinds(nvml: FakeNvml, tmp_path: Path) -> None:
    c = Checked(nvml, XidPolicy(disabled=frozenset({48})), tmp_path / "lock")
    c.checker.start()
    try:
        wait_until(lambda: nvml.calls.get("nvmlEventSetWait"), what="the loop waiting")
        nvml.inject_event(0, EVENT_DOUBLE_BIT_ECC, 0)
        nvml.inject_xid(0, 48)  # disabled by policy
        nvml.inject_xid(0, 31)  # always ignored
        nvml.inject_xid(1, 79)
        wait_until(lambda: (U1, "xid_critical") in c.events, what="critical Xid")
        assert c.events == [
            (U0, "non_xid_skipped"),
            (U0, "xid_ignored"),
            (U0, "xid_ignored"),
            (U1, "xid_critical"),
        ]
        assert c.healthy() == {U0: True, U1: False}
    finally:
        c.checker.stop()


def test_a_failing_wait_marks_everything_unhealthy(nvml: FakeNvml, tmp_path: Path) -> None:
    nvml.fail("nvmlEventSetWait", code="GPU_IS_LOST", times=1)
    c = Checked(nvml, XidPolicy(), tmp_path / "lock")
    c.checker.start()
    try:
        wait_until(lambda: c.healthy() == {U0: False, U1: False}, what="all unhealthy")
        assert sorted(c.events) == [(U0, "wait_error"), (U1, "wait_error")]
    finally:
        c.checker.stop()


def test_disabled_checks_never_start(nvml: FakeNvml, tmp_path: Path) -> None:
    c = Checked(nvml, XidPolicy(checks_disabled=True), tmp_path / "lock")
    c.checker.start()
    c.checker.stop()
    assert "nvmlEventSetCreate" not in nvml.calls


def _reasons(c: Checked, uuid: str) -> set[str]:
    return set(c.state.reasons(uuid))


def test_opt_in_conditions_come_and_go_with_nvml(nvml: FakeNvml, tmp_path: Path) -> None:
    c = Checked(nvml, XidPolicy(), tmp_path / "lock", frozenset(CHECKS))
    c.checker.start()
    try:
        wait_until(lambda: nvml.calls.get("nvmlDeviceGetTemperatureThreshold", 0) >= 4, what="two polls")
        assert c.healthy() == {U0: True, U1: True} and c.events == []
        nvml.update(0, temperature=95)  # default slowdown threshold 90
        nvml.update(1, remap_failure=True, remapped_uncorrectable=2)
        wait_until(lambda: c.healthy() == {U0: False, U1: False}, what="both unhealthy")
        assert _reasons(c, U0) == {"temperature_slowdown"} and _reasons(c, U1) == {"row_remap_failure"}
        nvml.update(0, temperature=87)  # below the threshold, not yet 5 C below: still unhealthy
        nvml.update(1, remap_failure=False, retired_pending=True)
        wait_until(lambda: _reasons(c, U1) == {"retired_pages_pending"}, what="remap cleared, pages pending")
        assert _reasons(c, U0) == {"temperature_slowdown"}
        nvml.update(0, temperature=80)
        nvml.update(1, retired_pending=False)
        wait_until(lambda: c.healthy() == {U0: True, U1: True}, what="both recovered")
        assert c.events == [
            (U0, "temperature_slowdown"),
            (U1, "row_remap_failure"),
            (U1, "retired_pages_pending"),
            (U1, "recovered"),
            (U0, "recovered"),
            (U1, "recovered"),
        ]
    finally:
        c.checker.stop()


def test_a_lost_device_and_a_double_bit_ecc_event(nvml: FakeNvml, tmp_path: Path) -> None:
    c = Checked(nvml, XidPolicy(), tmp_path / "lock", frozenset({"ecc", "device-lost"}))
    c.checker.start()
    try:
        wait_until(lambda: nvml.calls.get("nvmlEventSetWait"), what="the loop waiting")
        nvml.update(1, lost=True)
        nvml.update(0, ecc_uncorrected=1)
        nvml.inject_event(0, EVENT_DOUBLE_BIT_ECC, 0)
        wait_until(lambda: c.healthy() == {U0: False, U1: False}, what="both unhealthy")
        assert _reasons(c, U1) == {"device_lost"} and _reasons(c, U0) == {"ecc_double_bit"}
        nvml.update(1, lost=False)
        nvml.update(0, ecc_uncorrected=0)  # what a GPU reset does to the volatile counter
        wait_until(lambda: c.healthy() == {U0: True, U1: True}, what="both back")
        assert (U0, "non_xid_skipped") not in c.events  # ECC opted in: the event counts
    finally:
        c.checker.stop()


def test_hamis_default_ignores_everything_but_xids(nvml: FakeNvml, tmp_path: Path) -> None:
    nvml.update(0, temperature=99, ecc_uncorrected=5, retired_pending=True)
    nvml.update(1, lost=True)
    c = Checked(nvml, XidPolicy(), tmp_path / "lock")
    c.checker.start()
    try:
        wait_until(lambda: nvml.calls.get("nvmlEventSetWait", 0) >= 3, what="the loop waiting")
        assert "nvmlDeviceGetTemperatureThreshold" not in nvml.calls
        assert c.healthy()[U0]
        # U1 is gone: its event registration fails, which HAMi counts as unhealthy
        assert c.events == [(U1, "registration_failed")]
    finally:
        c.checker.stop()
