"""Rule evaluation cost in Debian's Prometheus: the shipped rules against a baseline (by default the same
rules without the capacity groups: chargeback, fragmentation, over-commit and the capacity alerts; with
--baseline, another rules file, such as the rules before the capacity work), on a backfilled history of
1,000 containers on 1,000 cards (125 nodes of 8; --nodes for a smaller run).

The rule sets run in one sitting, alternating servers (one at a time, each on the same history backfilled
just before it starts, so that its last samples are fresh: older than the 5-minute lookback, the raw
series would be stale and the rules would evaluate to nothing),
every group at the same evaluation interval (a group's own `interval:` is dropped for the run, so each is
read many times). Figures per set, each beside the baseline: the median over all reads of Σ
`prometheus_rule_group_last_duration_seconds` (what the issue budgets), Prometheus's own CPU per second
(with nothing to scrape, nearly all of it rule evaluation; steadier than wall-clock durations on a shared
machine), the evaluation load at the shipped group intervals (Σ median group duration / its interval, the
global one being --deployed-interval), the median per group, and the profile behind them: what one
evaluation reads (samples, from Prometheus's query statistics) and records (series), counts that do not
move with the machine's load, per group and at the shipped intervals; and the costliest rules (each
rule's `evaluationTime` from the rules API, median over all reads).
Target: the measured set within 1.10x of the baseline per evaluation. By default the history is 10
minutes at a 30 s scrape, so a 24-hour or 7-day window reads 20 samples a series, far fewer than in a
Prometheus that has scraped for that long. --history (with --scrape-interval) backfills that long a
history of the series the day- and week-long windows read (the others keep 10 minutes), and their hourly
tiles as hami-tiles.rules would have recorded them (what `promtool tsdb create-blocks-from rules` writes),
so those rules read a production-like number of samples; the rules with a window over an hour are then
printed one by one: samples read and evaluation time.

    PYTHONPATH=src python bench/bench_rules.py [--rounds 2] [--reads 8] [--nodes 125] \
        [--history 2d --scrape-interval 60s] [--baseline OLD-RULES.yaml] [--also OTHER-RULES.yaml]

The rules before the capacity work: `git show 46f6499:alerts/hami-rules.yaml > OLD-RULES.yaml`.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import requests
import yaml

from hami.demo.promconfig import seconds
from hami.testing import prometheus

RULES = Path(__file__).resolve().parent.parent / "alerts" / "hami-rules.yaml"
CAPACITY_GROUPS = {
    "hami-chargeback.rules",
    "hami-fragmentation.rules",
    "hami-overcommit.rules",
    "hami-capacity.alerts",
}
CARDS = 8
SHORT = 600  # seconds of history of every series but the LONG ones
# The series that the day- and week-long windows read, and the hourly tiles that stand for them.
LONG = {
    name: f"namespace_pod_container:{name}:max_over_time1h"
    for name in (
        "hami_vgpu_memory_used_bytes",
        "hami_vgpu_memory_allocated_bytes",
        "hami_vgpu_core_allocated_ratio",
    )
}
TILE = 3600
WINDOW = re.compile(r"\[(\d+)([smhdw])")
UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MON, SCH = 'job="hami-monitor"', 'job="hami-scheduler",instance="s:9395"'
# One series per container (vGPU rules) and per pod (chargeback) when the rules saw fresh raw series.
VGPU_RECORD = "namespace_pod_container:hami_vgpu_memory_used_per_limit:ratio"
CHARGEBACK_RECORD = "namespace_pod:hami_gpu_memory_reserved_bytes:sum"
CPU = re.compile(r"^process_cpu_seconds_total (\S+)$", re.M)
LAST = re.compile(r'^prometheus_rule_group_last_duration_seconds\{rule_group="[^;]*;([^"]*)"\} (\S+)$', re.M)


def series(nodes: int) -> Iterator[tuple[str, float, float]]:
    """(series, value, slope per step): every card half used and growing, one container per card."""
    for n in range(nodes):
        mi = f'{MON},instance="n{n}:9394"'
        yield f'hami_inconsistency{{{mi},node="n{n}",kind="memory_outside_hami"}}', 0, 0
        for g in range(CARDS):
            card = f'node="n{n}",device_uuid="GPU-{n}-{g}",device_index="{g}",device_type="NVIDIA-A100"'
            yield f"hami_host_gpu_memory_total_bytes{{{mi},{card}}}", 40e9, 0
            yield f"hami_host_gpu_memory_used_bytes{{{mi},{card}}}", 20e9, 1e6
            for name, value in (
                ("hami_gpu_memory_limit_bytes", 60e9),
                ("hami_gpu_memory_allocated_bytes", 30e9),
                ("hami_gpu_core_limit_ratio", 100),
                ("hami_gpu_core_allocated_ratio", 50),
                ("hami_gpu_split_limit", 10),
                ("hami_gpu_shared_count", 1),
            ):
                yield f"{name}{{{SCH},{card}}}", value, 0
            c = n * CARDS + g
            pod = f'namespace="ns{c % 20}",pod="p{c}",device_uuid="GPU-{n}-{g}",node="n{n}"'
            ctr = f'{mi},{pod},container="main",vdevice_index="0"'
            for name, value in (
                ("hami_vgpu_memory_used_bytes", 5e9),
                ("hami_vgpu_memory_limit_bytes", 10e9),
                ("hami_vgpu_core_used_percent", 30),
                ("hami_vgpu_core_limit_percent", 50),
                ("hami_container_last_kernel_elapsed_seconds", 10),
                ("hami_vgpu_memory_over_limit", 0),
            ):
                yield f"{name}{{{ctr}}}", value, 0
            alloc = f'{SCH},{pod},container_index="0"'
            yield f"hami_vgpu_memory_allocated_bytes{{{alloc}}}", 10e9, 0
            yield f"hami_vgpu_core_allocated_ratio{{{alloc}}}", 50, 0


def backfill(data: Path, work: Path, nodes: int, history: int, step: int) -> None:
    """Every series over the last SHORT seconds, the LONG ones over ``history``, a sample every ``step``;
    and the LONG ones' tiles, one each hour, the max of the hour's samples (as the hourly group records)."""
    end = int(time.time()) // step * step
    samples: list[tuple[str, float, float]] = []
    for name, value, slope in series(nodes):
        span = history if name.split("{")[0] in LONG else min(history, SHORT)
        points = [(value + slope * i, end - i * step) for i in range(span // step, -1, -1)]
        samples += [(name, v, float(ts)) for v, ts in points]
        if (tile := LONG.get(name.split("{")[0])) and history > TILE:
            tiled = tile + name[name.index("{") :]
            for hour in range((end - history) // TILE * TILE + TILE, end + 1, TILE):
                # the tile at `hour` covers the hour before it, as max_over_time(x[1h]) does
                peak = max((v for v, ts in points if hour - TILE <= ts <= hour), default=None)
                if peak is not None:
                    samples.append((tiled, peak, float(hour)))
    samples.sort(key=lambda s: (s[0], s[2]))  # one series' samples together, in time order
    prometheus.backfill_openmetrics(prometheus.openmetrics(samples), data, work)


def long_window(expr: str) -> bool:
    """Whether a rule reads a range longer than a tile: the rules the history is for."""
    return any(int(n) * UNIT[u] > TILE for n, u in WINDOW.findall(expr))


def intervals(rules: dict[str, Any], default: float) -> dict[str, float]:
    return {g["name"]: seconds(g["interval"]) if "interval" in g else default for g in rules["groups"]}


class Run(NamedTuple):
    durations: list[dict[str, float]]  # per read: group -> last duration, seconds
    rule_times: dict[str, list[float]]  # group/rule#position -> evaluation time at each read, seconds
    cpu: float  # the server's CPU seconds per second over the reads
    work: dict[str, tuple[int, int]]  # group -> (samples read, series recorded) in one evaluation
    long_reads: dict[str, int]  # group/rule#position of a long-window rule -> samples it reads


def measure(
    rules_path: Path, work: Path, interval: int, reads: int, nodes: int, *, history: tuple[int, int]
) -> Run:
    """Per-group last durations, ``reads`` times one interval apart, after every group ran at least once;
    at each read every rule's last evaluation time (the rules API), to say where a group spends it; the
    server's CPU seconds per second over the reads; and what each group reads and records."""
    data = work / "data"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir()
    backfill(data, work, nodes, *history)
    cfg = f"global:\n  evaluation_interval: {interval}s\nrule_files: [{rules_path}]\n"
    groups = yaml.safe_load(rules_path.read_text(encoding="utf-8"))["groups"]
    names = {g["name"] for g in groups}
    out: list[dict[str, float]] = []
    per_rule: dict[str, list[float]] = {}
    with prometheus.PrometheusServer(data, config_text=cfg) as srv:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            last = dict(LAST.findall(requests.get(f"{srv.url}/metrics", timeout=10).text))
            if len(last) == len(names) and all(float(v) > 0 for v in last.values()):
                break
            time.sleep(1)
        time.sleep(interval)
        cpu0, t0 = cpu_seconds(srv.url), time.monotonic()
        for _ in range(reads):
            body = requests.get(f"{srv.url}/metrics", timeout=10).text
            out.append({name: float(v) for name, v in LAST.findall(body)})
            for rule, took in rule_times(srv.url).items():
                per_rule.setdefault(rule, []).append(took)
            time.sleep(interval)
        cpu = (cpu_seconds(srv.url) - cpu0) / (time.monotonic() - t0)
        checks = (VGPU_RECORD, CHARGEBACK_RECORD) if "hami-chargeback.rules" in names else (VGPU_RECORD,)
        for record in checks:
            found = requests.get(f"{srv.url}/api/v1/query", timeout=30, params={"query": f"count({record})"})
            result = found.json()["data"]["result"]
            if not result or float(result[0]["value"][1]) != nodes * CARDS:
                raise RuntimeError(f"{record} lacks series: the fixture no longer matches the rules")
        done: dict[str, tuple[int, int]] = {}
        long_reads: dict[str, int] = {}
        for g in groups:
            read = recorded = 0
            for i, rule in enumerate(g["rules"]):
                r, w = evaluation_work(srv.url, rule)
                read, recorded = read + r, recorded + w
                if long_window(rule["expr"]):
                    long_reads[f"{g['name']}/{rule.get('record') or rule['alert']}#{i}"] = r
            done[g["name"]] = read, recorded
    return Run(out, per_rule, cpu, done, long_reads)


def evaluation_work(url: str, rule: dict[str, Any]) -> tuple[int, int]:
    """Samples a rule reads (Prometheus's query statistics) and series it records, in one evaluation:
    counts, steady where wall-clock and CPU figures are not."""
    params = {"query": f"count({rule['expr']})", "stats": "all"}
    data = requests.get(f"{url}/api/v1/query", timeout=120, params=params).json()["data"]
    read = int(data["stats"]["samples"]["totalQueryableSamples"])
    recorded = int(float(data["result"][0]["value"][1])) if "record" in rule and data["result"] else 0
    return read, recorded


def rule_times(url: str) -> dict[str, float]:
    """Each rule's last evaluation time, keyed group/name#position (a name may repeat in a group)."""
    api = requests.get(f"{url}/api/v1/rules", timeout=30).json()["data"]["groups"]
    return {
        f"{g['name']}/{r['name']}#{i}": float(r["evaluationTime"])
        for g in api
        for i, r in enumerate(g["rules"])
    }


def cpu_seconds(url: str) -> float:
    """Prometheus's own CPU time: with nothing to scrape, nearly all of it is rule evaluation."""
    return float(CPU.findall(requests.get(f"{url}/metrics", timeout=10).text)[0])


def strip_intervals(rules: dict[str, Any]) -> dict[str, Any]:
    """Every group at the server's interval, so that each is read many times in a short run."""
    return {"groups": [{k: v for k, v in g.items() if k != "interval"} for g in rules["groups"]]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2, help="servers per rule set, alternating")
    parser.add_argument("--reads", type=int, default=8, help="reads of the durations per server")
    parser.add_argument("--interval", type=int, default=5, help="evaluation interval of the run, seconds")
    parser.add_argument("--nodes", type=int, default=125, help=f"nodes of {CARDS} cards, one container each")
    parser.add_argument("--top", type=int, default=12, help="costliest rules printed per set")
    parser.add_argument(
        "--history",
        default="10m",
        help="history of the series the day- and week-long windows read, a Prometheus duration (default 10m)",
    )
    parser.add_argument(
        "--scrape-interval", default="30s", help="time between backfilled samples (default 30s)"
    )
    parser.add_argument(
        "--deployed-interval",
        type=int,
        default=15,
        help="Prometheus's evaluation_interval for the load at the shipped group intervals (default 15)",
    )
    parser.add_argument("--rules", type=Path, default=RULES, help="the rules measured (default: shipped)")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="the rules the others are compared with (default: measured ones without the capacity groups)",
    )
    parser.add_argument(
        "--also", type=Path, action="append", default=[], help="another rules file to measure beside them"
    )
    args = parser.parse_args()
    if not prometheus.available():
        raise SystemExit("needs Debian's prometheus and promtool (apt-get install prometheus)")
    shipped: dict[str, Any] = yaml.safe_load(args.rules.read_text(encoding="utf-8"))
    sets: dict[str, dict[str, Any]] = {}
    if args.baseline:
        sets[f"baseline {args.baseline}"] = yaml.safe_load(args.baseline.read_text(encoding="utf-8"))
    sets["no capacity"] = {"groups": [g for g in shipped["groups"] if g["name"] not in CAPACITY_GROUPS]}
    sets |= {str(p): yaml.safe_load(p.read_text(encoding="utf-8")) for p in args.also}
    sets["measured"] = shipped
    reads: dict[str, list[dict[str, float]]] = {name: [] for name in sets}
    cpu: dict[str, list[float]] = {name: [] for name in sets}
    rules: dict[str, dict[str, list[float]]] = {name: {} for name in sets}
    work_done: dict[str, dict[str, tuple[int, int]]] = {}
    long_reads: dict[str, dict[str, int]] = {}
    history = int(seconds(args.history)), int(seconds(args.scrape_interval))
    with tempfile.TemporaryDirectory(prefix="bench-rules-") as tmp:
        work = Path(tmp)
        for _ in range(args.rounds):
            for i, (name, data) in enumerate(sets.items()):
                path = work / f"rules-{i}.yaml"
                path.write_text(yaml.safe_dump(strip_intervals(data)), encoding="utf-8")
                run = measure(path, work, args.interval, args.reads, args.nodes, history=history)
                reads[name] += run.durations
                cpu[name].append(run.cpu)
                work_done[name] = run.work
                long_reads[name] = run.long_reads
                for rule, values in run.rule_times.items():
                    rules[name].setdefault(rule, []).extend(values)
    containers = args.nodes * CARDS
    print(
        f"{containers} containers on {containers} cards, a sample every {args.scrape_interval} backfilled "
        f"({args.history} of the series the long windows read, {min(history[0], SHORT)}s of the others); "
        f"every group every {args.interval}s; {args.rounds} x {args.reads} reads per rule set; shipped "
        f"intervals at evaluation_interval {args.deployed_interval}s"
    )
    base: dict[str, float] = {}
    for name, rows in reads.items():
        every = intervals(sets[name], args.deployed_interval)
        groups = {g: statistics.median(r.get(g, 0.0) for r in rows) for g in rows[0]}
        total = statistics.median(sum(r.values()) for r in rows)
        used = statistics.median(cpu[name])
        load = sum(v / every[g] for g, v in groups.items())
        done = work_done[name]
        read, recorded = sum(r for r, _ in done.values()), sum(w for _, w in done.values())
        read_s = sum(r / every[g] for g, (r, _) in done.items())
        recorded_s = sum(w / every[g] for g, (_, w) in done.items())
        now = {"sum": total, "cpu": used, "load": load, "read": read, "recorded": recorded}
        now |= {"read_s": read_s, "recorded_s": recorded_s}
        base = base or now
        x = {k: v / base[k] if base[k] else float("nan") for k, v in now.items()}
        print(
            f"{name}: Σ last duration {total * 1e3:.1f} ms ({x['sum']:.2f}x); "
            f"Prometheus CPU {used * 1e3:.0f} ms/s ({x['cpu']:.2f}x); at the shipped intervals: "
            f"{load * 1e3:.1f} ms/s ({x['load']:.2f}x)\n"
            f"  one evaluation reads {read} samples ({x['read']:.2f}x) and records {recorded} series "
            f"({x['recorded']:.2f}x); at the shipped intervals {read_s:.0f} samples/s ({x['read_s']:.2f}x) "
            f"and {recorded_s:.0f} series/s ({x['recorded_s']:.2f}x)"
        )
        for group, value in sorted(groups.items(), key=lambda kv: -kv[1]):
            r, w = done[group]
            print(
                f"    {group:<28} {value * 1e3:7.1f} ms  {r:7d} read {w:6d} recorded  every {every[group]:g}s"
            )
        costs = sorted(((statistics.median(v), r) for r, v in rules[name].items()), reverse=True)
        every_rule = sum(c for c, _ in costs)
        print(f"  costliest rules (evaluationTime, median over reads; all rules: {every_rule * 1e3:.1f} ms):")
        for value, rule in costs[: args.top]:
            print(f"    {value * 1e3:7.1f} ms  {rule.split('#')[0]}")
        if long_reads[name]:
            print("  rules with a window over an hour (evaluationTime, median over reads; samples read):")
        for rule, read in long_reads[name].items():
            took = statistics.median(rules[name].get(rule, [float("nan")]))
            print(f"    {took * 1e3:7.1f} ms  {read:9d} read  {rule.split('#')[0]}")
    print(f"target: the measured set within 1.10x of {next(iter(sets))} per evaluation (Σ last duration)")


if __name__ == "__main__":
    main()
