"""Container dir discovery: junk ignored, newest cache file wins, GC after the resync interval."""

import os
from pathlib import Path

from hami.exporter.discovery import ContainerLister, FileEntry, parse_dir_name, pick_cache_file
from hami.exporter.region import reasons
from hami.exporter.region.parse import RegionSnapshot
from hami.testing.regions import RegionWriter


def test_dir_name_split_at_first_underscore() -> None:
    assert parse_dir_name("7c1e-uid_main") == ("7c1e-uid", "main")
    assert parse_dir_name("uid_a_b") == ("uid", "a_b")
    assert parse_dir_name("nounderscore") is None
    assert parse_dir_name("_main") is None and parse_dir_name("uid_") is None


def test_pick_cache_file() -> None:
    entries = [
        FileEntry("libvgpu.so", 9, False), FileEntry("old.cache", 1, False), FileEntry("new.cache", 5, False),
        FileEntry("dir.cache", 10, True), FileEntry("notes.txt", 11, False),
        FileEntry("libvgpu.so.cache", 12, False),
    ]
    assert pick_cache_file(entries) == "new.cache"
    assert pick_cache_file([FileEntry("libvgpu.so", 1, False)]) is None


def make(tmp: Path, name: str, version: str = "v1.2", cache: str = "a.cache") -> RegionWriter:
    d = tmp / "containers" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "libvgpu.so").write_bytes(b"")
    w = RegionWriter.create(str(d / cache), version)
    w.initialise(["GPU-x"])
    return w


def test_update_loads_regions_and_ignores_junk(tmp_path: Path) -> None:
    w = make(tmp_path, "uid1_main")
    (tmp_path / "containers" / "junkdir").mkdir()
    (tmp_path / "containers" / "uid9_file").write_text("not a dir", encoding="utf-8")
    (tmp_path / "containers" / "uid2_empty").mkdir()
    bad = tmp_path / "containers" / "uid3_bad"
    bad.mkdir()
    (bad / "r.cache").write_bytes(b"\1\2")
    lister = ContainerLister(str(tmp_path))
    result = lister.update(None)
    by_name = {c.dirname: c for c in lister.containers()}
    assert set(by_name) == {"uid1_main", "uid2_empty", "uid3_bad"}
    assert result.loaded == 1 and result.errors == [reasons.FILE_TOO_SMALL]
    region = by_name["uid1_main"].region
    assert region is not None and isinstance(region.read(), RegionSnapshot)
    assert by_name["uid2_empty"].region is None
    lister.close()
    w.close()


def test_newer_cache_file_replaces_mapping(tmp_path: Path) -> None:
    w1 = make(tmp_path, "uid1_main", cache="a.cache")
    lister = ContainerLister(str(tmp_path))
    lister.update(None)
    w2 = make(tmp_path, "uid1_main", cache="b.cache")
    os.utime(tmp_path / "containers" / "uid1_main" / "a.cache", (1, 1))
    lister.update(None)
    (c,) = lister.containers()
    assert c.cache_path is not None and c.cache_path.endswith("b.cache")
    lister.close()
    w1.close()
    w2.close()


def test_gc_only_unknown_pods_past_resync(tmp_path: Path) -> None:
    clock = [1000.0]
    make(tmp_path, "gone_main").close()
    make(tmp_path, "new_main").close()
    make(tmp_path, "live_main").close()
    root = tmp_path / "containers"
    os.utime(root / "gone_main", (0, 600.0))  # older than 300 s
    os.utime(root / "new_main", (0, 900.0))  # within the grace period
    lister = ContainerLister(str(tmp_path), resync_s=300, clock=lambda: clock[0])
    assert lister.update(None).removed == []  # informer not synced: never GC
    result = lister.update({"live"})
    assert result.removed == ["gone_main"] and not (root / "gone_main").exists()
    assert (root / "new_main").exists() and (root / "live_main").exists()
    assert {c.dirname for c in lister.containers()} == {"new_main", "live_main"}
    clock[0] = 1300.0
    assert lister.update({"live"}).removed == ["new_main"]
    lister.close()
