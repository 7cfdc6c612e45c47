"""A GPU tenant owns its cache directory: whatever it puts there, the monitor neither dies, nor
follows it elsewhere, nor reports someone else's usage under its pod."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from hami.core.codec.pod_devices import decode_pod_devices
from hami.exporter.collector import MonitorCollector
from hami.exporter.discovery import ContainerLister
from hami.exporter.feedback import feedback_tick
from hami.exporter.region import reasons
from hami.testing.processes import free_port
from hami.testing.regions import MEM_DATA, RegionWriter
from hami.testing.wait import wait_until

UUID = "GPU-aaaaaaaa-1111-2222-3333-444444444444"


def region(path: Path, recent_kernel: int = 2) -> RegionWriter:
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = RegionWriter.create(str(path), "v1.2")
    writer.initialise([UUID], limits=[1 << 30])
    writer.change_memory(writer.add_process(100), 0, MEM_DATA, 4096)
    writer.set_field("recent_kernel", recent_kernel)
    return writer


def samples(text: str, name: str) -> dict[str, float]:
    """``label value -> sample`` of one family, keyed by its ``state`` or ``reason`` label."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[s.labels.get("state") or s.labels.get("reason", "")] = s.value
    return out


def test_truncating_a_region_while_it_is_scraped_does_not_kill_the_monitor(
    tmp_path: Path, kube_config_file: Path
) -> None:
    hook = tmp_path / "hook"
    cache = hook / "containers" / "uid1_main" / "r.cache"
    region(cache).close()
    full = cache.stat().st_size
    port = free_port()
    log = (tmp_path / "monitor.log").open("wb")
    monitor = subprocess.Popen(
        [sys.executable, "-m", "hami.exporter", "--metrics-bind-address", f"127.0.0.1:{port}",
         "--kubeconfig", str(kube_config_file)],
        env={**os.environ, "HOOK_PATH": str(hook), "NODE_NAME": "n1"},
        stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    stop = threading.Event()

    def tenant() -> None:
        # what a tenant can do to its own file, as fast as it can, while the monitor reads it
        while not stop.is_set():
            os.truncate(cache, 4096)
            os.truncate(cache, full)

    try:
        def scraped_ok() -> bool:
            try:
                text = requests.get(url, timeout=5).text
            except requests.RequestException:
                return False
            return samples(text, "hami_monitor_regions").get("ok") == 1
        wait_until(scraped_ok, 60, "the region read by the monitor")
        attacker = threading.Thread(target=tenant)
        attacker.start()
        try:
            deadline = time.monotonic() + 5
            with requests.Session() as session:
                while time.monotonic() < deadline:
                    assert session.get(url, timeout=5).status_code == 200
            assert monitor.poll() is None
        finally:
            stop.set()
            attacker.join(10)
        os.truncate(cache, 0)
        text = requests.get(url, timeout=5).text
        assert samples(text, "hami_monitor_region_skips_total")[reasons.TRUNCATED] >= 1
    finally:
        monitor.terminate()
        monitor.wait(30)
        log.close()
    assert monitor.returncode == 0, (tmp_path / "monitor.log").read_text(encoding="utf-8")[-2000:]


def test_a_symlinked_cache_file_is_never_followed_nor_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "outside" / "victim.cache"
    region(victim, recent_kernel=5).close()  # the feedback loop would decay it to 4
    before = victim.read_bytes()
    attacker = tmp_path / "hook" / "containers" / "uid1_main"
    attacker.mkdir(parents=True)
    (attacker / "evil.cache").symlink_to(victim)
    lister = ContainerLister(str(tmp_path / "hook"))
    try:
        result = lister.update(None)
        feedback_tick(lister)
        assert victim.read_bytes() == before
        assert result.errors == [reasons.SYMLINK] and result.loaded == 0
    finally:
        lister.close()


def test_linking_another_tenants_region_reports_nothing_under_the_attackers_pod(tmp_path: Path) -> None:
    containers = tmp_path / "hook" / "containers"
    writer = region(containers / "uid1_victim" / "r.cache")
    (containers / "uid2_attacker").mkdir()
    (containers / "uid2_attacker" / "r.cache").symlink_to(containers / "uid1_victim" / "r.cache")
    lister = ContainerLister(str(tmp_path / "hook"))
    try:
        errors = lister.update(None).errors
        read = MonitorCollector("n1", lister, tuple, decode_pod_devices).read_regions()
        assert set(read.found) == {("uid1", "victim")}
        assert read.states == {"ok": 1, "skipped": 1} and read.skipped == {reasons.SYMLINK: 1}
        assert errors == [reasons.SYMLINK]
    finally:
        lister.close()
        writer.close()


def test_a_fifo_or_a_directory_named_like_a_cache_file_is_refused_without_blocking(tmp_path: Path) -> None:
    containers = tmp_path / "hook" / "containers"
    (containers / "uid1_main").mkdir(parents=True)
    os.mkfifo(containers / "uid1_main" / "r.cache")  # opening it to read would block forever
    (containers / "uid2_main" / "d.cache").mkdir(parents=True)
    lister = ContainerLister(str(tmp_path / "hook"))
    try:
        result = lister.update(None)
        assert result.errors == [reasons.NOT_REGULAR_FILE] and result.loaded == 0
    finally:
        lister.close()
