"""Scrape time and RSS of the monitor: 8 GPUs x 10 containers and 1,000 containers.

Each scenario runs in its own process (so RSS is its own): regions are written with the byte-exact
writer, and /metrics is called through the WSGI app the daemon serves (no socket): text 0.0.4,
OpenMetrics, and OpenMetrics with gzip (what Prometheus 2.x asks for) on the rendered fast path,
beside the collector path through prometheus_client's generate_latest and a naive baseline that
reads every byte of every region file per scrape, in the same run. The pods come as the informer
hands them out: the same objects from scrape to scrape.

The main figures are taken on a steady node (the writers stopped: every region unchanged between
scrapes, the common case of idle or steady containers); "churn" scrapes a node where every region
changes between two scrapes (a simulation step, untimed, before each), the worst case for what the
monitor keeps across scrapes. Per sample figures are the scrape thread's CPU time (on a shared
machine, wall time counts the other tenants too). The breakdown splits a steady text scrape into
its stages (medians, so they add up only roughly): region reads; the pod side and NVML (the rest
of ``view``); families and their rendering; the registry's part and the WSGI app; gzip on top of
an OpenMetrics scrape.
Targets: <= 5 ms median at 80 containers, <= 50 ms at 1,000, <= 50 MiB RSS, and <= 2 us per
exported sample at 1,000 containers; each is printed as a ratio beside the figure (the collector
path and the naive baseline per sample too, from the same run). Figures and what they mean:
docs/design/monitor-performance.md.

    PYTHONPATH=src python bench/bench_exporter.py [--scrapes 200]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.serve import build_info, make_app
from hami.exporter.collector import MonitorCollector
from hami.exporter.discovery import ContainerLister
from hami.exporter.host import HostReader
from hami.exporter.region.parse import RegionSnapshot, parse_region
from hami.testing.simnode import SimNode

PROMETHEUS_ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"


def rss_mib() -> float:
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def timed(fn: Any, n: int) -> dict[str, float]:
    return interleaved({"fn": fn}, n)["fn"]


def interleaved(fns: dict[str, Any], n: int) -> dict[str, dict[str, float]]:
    """Median and p99 ms of each of ``fns``, called in turn ``n`` times (a load that comes and goes
    on a shared machine weighs on all of them alike), and the median CPU ms of this thread."""
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(n):
        for name, fn in fns.items():
            c, t = time.thread_time(), time.perf_counter()
            fn()
            wall[name].append((time.perf_counter() - t) * 1000)
            cpu[name].append((time.thread_time() - c) * 1000)
    out = {}
    for name, got in wall.items():
        got.sort()
        out[name] = {
            "median_ms": statistics.median(got),
            "p99_ms": got[min(len(got) - 1, int(len(got) * 0.99))],
            "cpu_median_ms": statistics.median(cpu[name]),
        }
    return out


def scenario(containers: int, gpus: int, scrapes: int, churn: bool) -> dict[str, Any]:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory() as tmp:
        node = SimNode(tmp, gpus=gpus, containers=containers, seed=1)
        for _ in range(4):  # every container started, with live processes
            node.step()
        pods = node.pods()  # the informer's list: the same pod objects while no pod changes
        if not churn:
            node.stop()  # unmap the writers' side: RSS below is the monitor's alone
        lister = ContainerLister(tmp)
        lister.update(None)
        registry = CollectorRegistry()
        build_info("monitor", registry)
        collector = MonitorCollector(
            "bench-node", lister, lambda: pods, decode_pod_devices, registry=registry
        )
        collector.hosts = HostReader(node.nvml, collector.nvml_errors.add).read
        app = make_app(registry, exposition=collector)

        def scrape(accept: str = "*/*", encoding: str = "") -> bytes:
            environ = {
                "PATH_INFO": "/metrics",
                "REQUEST_METHOD": "GET",
                "HTTP_ACCEPT": accept,
                "HTTP_ACCEPT_ENCODING": encoding,
            }
            return b"".join(app(environ, lambda status, headers: None))

        body = scrape()
        samples = body.count(b"\n") - body.count(b"\n#")
        if churn:  # a simulation step (every region changes), untimed, before each timed scrape
            times = []
            for _ in range(scrapes):
                node.step()
                times.append(timed(scrape, 1))
            node.stop()
            lister.close()
            got = {k: statistics.median(t[k] for t in times) for k in ("median_ms", "cpu_median_ms")}
            return {"samples": samples, "scrape_churn": got}
        base_rss = rss_mib()
        got = interleaved(
            {
                "scrape": scrape,
                "scrape_openmetrics": lambda: scrape(PROMETHEUS_ACCEPT),
                "scrape_openmetrics_gzip": lambda: scrape(PROMETHEUS_ACCEPT, "gzip"),
                "read": collector.read_regions,
                "view": collector.view,
                "render": lambda: collector.render(False),
            },
            scrapes,
        )
        rss = rss_mib()
        full = CollectorRegistry()
        full.register(registry)
        full.register(collector)
        collector_path = timed(lambda: generate_latest(full), max(5, scrapes // 4))
        paths = [c.cache_path for c in lister.containers() if c.cache_path]

        def naive() -> None:
            # the baseline: read every byte of every region file, then parse the copy
            for p in paths:
                with open(p, "rb") as f:
                    data = f.read()
                assert isinstance(parse_region(data, len(data)), RegionSnapshot)
            generate_latest(full)

        baseline = timed(naive, max(5, scrapes // 10))
        lister.close()
    median = {k: v["cpu_median_ms"] for k, v in got.items()}
    return {
        "containers": containers,
        "gpus": gpus,
        "samples": samples,
        "scrape": got["scrape"],
        "scrape_openmetrics": got["scrape_openmetrics"],
        "scrape_openmetrics_gzip": got["scrape_openmetrics_gzip"],
        "collector_path": collector_path,
        "breakdown_ms": {
            "region reads": median["read"],
            "pods+NVML": median["view"] - median["read"],
            "families+render": median["render"] - median["view"],
            "registry+WSGI": median["scrape"] - median["render"],
            "gzip": median["scrape_openmetrics_gzip"] - median["scrape_openmetrics"],
        },
        "naive_read_every_byte": baseline,
        "rss_mib_after_scrapes": round(rss, 1),
        "rss_mib_before_scrapes": round(base_rss, 1),
        "maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--scrapes", type=int, default=200)
    p.add_argument("--one", nargs=2, type=int, metavar=("CONTAINERS", "GPUS"))
    p.add_argument("--churn", action="store_true", help="with --one: the churn scrapes alone")
    args = p.parse_args()
    if args.one:
        print(json.dumps(scenario(args.one[0], args.one[1], args.scrapes, args.churn)))
        return 0
    for containers, gpus, scrapes in ((80, 8, args.scrapes), (1000, 8, max(20, args.scrapes // 4))):
        r: dict[str, Any] = {}
        one = [sys.executable, __file__, "--one", str(containers), str(gpus)]
        for extra in (["--scrapes", str(scrapes)], ["--churn", "--scrapes", str(max(5, scrapes // 4))]):
            out = subprocess.run(
                [*one, *extra],
                capture_output=True,
                text=True,
                check=True,
                env=os.environ,
            )
            r |= json.loads(out.stdout)
        print(
            f"{r['containers']:5d} containers / {r['gpus']} GPUs, {r['samples']} samples: "
            f"scrape median {r['scrape']['median_ms']:.2f} ms p99 {r['scrape']['p99_ms']:.2f} ms | "
            f"OpenMetrics median {r['scrape_openmetrics']['median_ms']:.2f} ms "
            f"p99 {r['scrape_openmetrics']['p99_ms']:.2f} ms | "
            f"+gzip median {r['scrape_openmetrics_gzip']['median_ms']:.2f} ms "
            f"p99 {r['scrape_openmetrics_gzip']['p99_ms']:.2f} ms | "
            f"collector path median {r['collector_path']['median_ms']:.2f} ms "
            f"p99 {r['collector_path']['p99_ms']:.2f} ms | "
            f"naive read-every-byte median {r['naive_read_every_byte']['median_ms']:.2f} ms "
            f"p99 {r['naive_read_every_byte']['p99_ms']:.2f} ms | RSS {r['rss_mib_after_scrapes']} MiB "
            f"(max {r['maxrss_mib']} MiB)"
        )
        n = max(r["samples"], 1)
        target_ms = 5.0 if containers <= 80 else 50.0
        # per sample: CPU time of the scrape's thread (wall time on a shared machine counts the others)
        per = {k: r[k]["cpu_median_ms"] * 1000 / n
               for k in ("scrape", "scrape_churn", "collector_path", "naive_read_every_byte")}
        naive = per["naive_read_every_byte"]
        print(
            f"      targets: median {r['scrape']['median_ms'] / target_ms:.2f}x of <= {target_ms:.0f} ms, "
            f"RSS {r['rss_mib_after_scrapes'] / 50:.2f}x of <= 50 MiB; CPU per sample: rendered "
            f"{per['scrape']:.2f} us ({per['scrape'] / 2:.2f}x of <= 2 us), collector path "
            f"{per['collector_path']:.2f} us ({per['collector_path'] / per['scrape']:.1f}x rendered), naive "
            f"{naive:.2f} us ({naive / per['scrape']:.1f}x rendered); churn {per['scrape_churn']:.2f} us "
            f"({per['scrape_churn'] / 2:.2f}x of <= 2 us)"
        )
        parts = ", ".join(f"{k} {v * 1000 / n:.2f}" for k, v in r["breakdown_ms"].items())
        print(f"      breakdown, CPU us per sample (steady text scrape): {parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
