"""`hami-doctor logs`: the guides' literal log lines, and this project's, map to their meaning and action."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami.doctor import logscan
from tests.doctor.doctorcluster import run_doctor, run_json

# (line as the guides print it, expected pattern key, the guide's severity)
GUIDE_LINES = [
    # docs/guides/device-plugin-debugging.md §1.3, §7
    ("E nvml Init err: ERROR_LIBRARY_NOT_FOUND", "nvml-init-err", "Fatal"),
    ("E nvml GetDeviceCount err", "nvml-device-count-err", "Fatal"),
    ("E nvml get memory error", "nvml-memory-err", "Fatal"),
    ("W GetMemoryInfo not supported", "memory-info-unsupported", "Warning"),
    ('E get node error nodes "gpu-1" not found', "get-node-error", "Error"),
    ('E patch node error nodes "gpu-1" is forbidden', "patch-node-error", "Error"),
    ("E device number not matched", "device-number-not-matched", "Error"),
    ("E invalid allocation request for 'nvidia.com/gpu': unknown device: GPU-x", "unknown-device", "Error"),
    ("E request 2 too large", "request-too-large", "Error"),  # §4.4
    ("E failed to get pending pod", "failed-to-get-pending-pod", "Error"),
    ("E failed to decode pod devices", "failed-to-decode-pod-devices", "Error"),
    ("I Successfully registered annotation. Next check in 30s seconds...", "registered-annotation", "Info"),
    ("W Retrying in 5s seconds...", "retrying", "Warning"),
    ("F GRPC server has repeatedly crashed recently. Quitting", "grpc-crashed", "Fatal"),
    ("I MIG apply lock file detected", "mig-apply-lock", "Info"),
    ("I Registered device plugin for 'nvidia.com/gpu' with Kubelet", "registered-kubelet", "Info"),  # §1.2
    ("E handshake time expired", "handshake-time-expired", "Error"),  # §4.3
    ("E node gpu-1 handshake timeout", "handshake-timeout", "Error"),
    ("E device decode error", "device-decode-error", "Error"),
    ("E node not found", "node-not-found", "Error"),
    # the V(4) filter lines of docs/guides/scheduler-debugging.md §3.2 and the FilteringFailed grep
    (
        "I0211 10:30:15.123456  1  filter.go:125] Filtering node gpu-node-01 for pod test-pod",
        "filtering-node",
        "Info",
    ),
    (
        "I0211 10:30:15.123789  1  filter.go:150] Node gpu-node-01 filtered out: CardInsufficientMemory, "
        "requested 8192Mi but available 4096Mi",
        "filtered-out:CardInsufficientMemory",
        "Warning",
    ),
    ("W FilteringFailed 2 nodes CardInsufficientMemory(n1,n2)", "filtering-failed", "Warning"),
    ("E node gpu-1 has been locked within 5m0s: node lock contention", "node-lock-contention", "Warning"),
    # HAMi's lines the tuning guide quotes (§2.1, §2.2), and this project's daemons' own wording
    ("W node lock expired, releasing", "node-lock-expired", "Warning"),
    (
        "I0613 09:10:00.000001    7 nodelock.py:160] node gpu-1: node lock expired, releasing "
        "'2025-06-13T09:00:00Z,ml,train' (older than 0:05:00)",
        "node-lock-expired",
        "Warning",
    ),
    ("I node gpu-1: lock owner ml/gone is gone, taking the lock over", "node-lock-owner-gone", "Info"),
    ("E rate limiter Wait returned error: context deadline exceeded", "client-rate-limited", "Warning"),
    ("E client rate limiter: context deadline exceeded", "client-rate-limited", "Warning"),
    (
        "W0613 09:10:00.000001    7 register.py:150] node stale-node: handshake 'Requesting_2025-06-13 "
        "08:50:00' expired and no nvidia.com/gpu allocatable, cleaning up",
        "handshake-timeout",
        "Error",
    ),
    (
        "I Starting to serve 'nvidia.com/gpu' on /var/lib/kubelet/device-plugins/nvidia-gpu.sock",
        "grpc-serving",
        "Info",
    ),
    ("I Starting WatchAndRegister", "watch-and-register", "Info"),
]


@pytest.mark.parametrize(("line", "key", "level"), GUIDE_LINES)
def test_guide_line_is_classified(line: str, key: str, level: str) -> None:
    found = logscan.classify(line)
    assert found is not None
    pattern, got_key, meaning, action = found
    assert (got_key, pattern.level) == (key, level)
    assert meaning and action


def test_filtered_out_line_takes_the_reason_table() -> None:
    found = logscan.classify("Node n1 filtered out: ExclusiveDeviceAllocateConflict")
    assert found is not None
    assert found[3] == "wait for the pods on it to finish, or schedule to another node"


def test_unknown_lines_are_counted_not_matched() -> None:
    result = logscan.scan(["hello", "world"])
    assert result.lines == 2 and result.hits == {}


def test_counts_and_first_occurrence_from_stdin() -> None:
    text = "I start\nE patch node error a\nW Retrying in 5s seconds\nE patch node error b\n"
    code, doc = run_json(None, "logs", "-", stdin=text)
    rows = doc["sections"][0]["tables"][0]["rows"]
    assert rows == [["patch-node-error", "Error", "2", "2"], ["retrying", "Warning", "1", "3"]]
    finding = next(f for f in doc["sections"][0]["findings"] if f["code"] == "log.patch-node-error")
    assert finding["evidence"] == ["first at line 2: E patch node error a"]
    assert code == 2


def test_exit_code_is_the_worst_level(tmp_path: Path) -> None:
    path = tmp_path / "dp.log"
    path.write_text("I Successfully registered annotation\nW GetMemoryInfo not supported\n", encoding="utf-8")
    assert run_doctor(None, "logs", str(path))[0] == 1
    path.write_text("I Successfully registered annotation\n", encoding="utf-8")
    assert run_doctor(None, "logs", str(path))[0] == 0
    assert run_doctor(None, "logs", str(tmp_path / "missing.log"))[0] == 3


def test_python_dash_m_entry_point() -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "hami.doctor", "logs", "-"],
        input="E nvml Init err\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and "nvml-init-err" in proc.stdout


def test_a_directory_is_read_file_by_file(tmp_path: Path) -> None:
    (tmp_path / "scheduler.log").write_text("W node lock expired, releasing\nI nothing\n", encoding="utf-8")
    (tmp_path / "device-plugin.log").write_text("E patch node error forbidden\n", encoding="utf-8")
    (tmp_path / "empty.d").mkdir()
    code, doc = run_json(None, "logs", str(tmp_path))
    assert code == 2
    titles = [s["title"] for s in doc["sections"]]
    assert titles == [f"log {tmp_path / 'device-plugin.log'}", f"log {tmp_path / 'scheduler.log'}"]
    found = {f["code"] for s in doc["sections"] for f in s["findings"]}
    assert {"log.patch-node-error", "log.node-lock-expired"} <= found


def test_an_empty_directory_is_a_usage_error(tmp_path: Path) -> None:
    code, _ = run_doctor(None, "logs", str(tmp_path))
    assert code == 3
