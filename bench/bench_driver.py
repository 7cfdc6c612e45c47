"""The driver's accounting in a scrape: the cgroup walk and the dmem reads of 1,000 containers.

A cgroup v2 tree on disk (``hami.testing.cgrouptree``: the kubelet's systemd layout, dmem files as the
kernel writes them) with 1,000 pod containers, read through ``hami.exporter.cgroupfs``: a full walk
(done at start, when a new container is asked for, and once a minute), a steady scrape (the kept walk,
then each container's dmem files), and a steady scrape on a node without dmem (NVML alone needs only
the kept paths). Best of ``--rounds``, wall time; the target is the monitor's whole-scrape budget at
1,000 containers (docs/design/monitor-performance.md), printed as a ratio beside each figure.

    PYTHONPATH=src python bench/bench_driver.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable

from hami.exporter import cgroupfs
from hami.testing.cgrouptree import CgroupTree, Limits

CONTAINERS = 1000
TARGET_MS = 50.0


def best_ms(fn: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=5)
    rounds = p.parse_args().rounds
    with tempfile.TemporaryDirectory() as root:
        tree = CgroupTree(root)
        keys = set()
        for i in range(CONTAINERS):
            key = (str(uuid.UUID(int=i)), f"{i:064x}")
            tree.add_container(*key, {"00000000:1A:00.0": Limits(used=i, hard=1 << 30)})
            keys.add(key)
        index = cgroupfs.CgroupIndex(root)
        found, _ = index.lookup(keys)
        assert len(found) == CONTAINERS

        def steady() -> None:
            got, _ = index.lookup(keys)
            for cg in got.values():
                index.read_dmem(cg)

        for what, ms in (
            ("full walk", best_ms(lambda: cgroupfs.scan(root), rounds)),
            ("steady scrape, dmem", best_ms(steady, rounds)),
            ("steady scrape, no dmem", best_ms(lambda: index.lookup(keys), rounds)),
        ):
            ratio = ms / TARGET_MS
            print(f"{what:<24} {CONTAINERS} containers: {ms:8.2f} ms  ({ratio:.2f} x the 50 ms budget)")


if __name__ == "__main__":
    main()
