"""End-to-end extender throughput: pods/s through POST /filter + POST /bind over HTTP, and the API
calls one idle register tick costs, with the emulator and the extender in their own processes.

Run: PYTHONPATH=src python bench/bench_extender.py [--nodes 1000] [--pods 400] [--clients 8] [--pipeline]
     [--pprof SECONDS --pprof-out FILE] [--profiling | --profiling-rounds N] [--heap-from-start]
     [--in-process: the older single-process variant]
     [--real: through the real kube-scheduler and kube-apiserver, bench_extender_real.py]

The Kubernetes API emulator (``python -m hami.testing.kubeapi``) and the extender
(``python -m hami.scheduler``) run as child processes; this process seeds ``--nodes`` nodes × 8 GPUs
(T4, split 10) and ``--pods`` pods through the emulator's HTTP API, then runs the load clients.
Each client takes pods from a queue and does what kube-scheduler does: filter over every node
name, then bind to the chosen node. A simulated device plugin drops the node lock with one merge
patch right after a successful bind (as Allocate would); a bind that meets a held lock is retried
with a new filter, as kube-scheduler retries. With ``--pipeline`` the load has kube-scheduler's own
shape instead: one scheduling loop filters one pod at a time and ``--clients`` threads bind (its
asynchronous binding cycle); throughput is the same CPU-bound figure, filter latency is lower.

Figures: pods/s (wall clock from the first filter to the last bind), filter and bind latency
percentiles seen by the clients, the extender's API requests per pod (its own
``rest_client_requests_total``, events included, counted once its event queue has drained), API
calls per idle register tick (requests between two full register passes once every handshake is
written), each process's CPU seconds per pod from /proc/<pid>/stat, and what one full /metrics
scrape of the extender costs at this cluster size (its per-device series). With ``--pprof N`` the
extender runs with ``--profiling`` and an N-second CPU profile is taken during the load (read it
with ``go tool pprof -top FILE``). ``--profiling`` runs the extender with it and takes no profile;
``--profiling-rounds N`` runs N rounds alternating without and with ``--profiling`` (each on a
freshly seeded cluster, the order flipped every round) and prints the extender CPU per pod of each
and their ratio (target: within 5 % of off, since ``--profiling`` traces nothing until a profile is
asked for). ``--heap-from-start`` adds ``--profiling.heap-from-start`` wherever ``--profiling`` is
given, to measure the opt-in's price the same way. ``--tracing-rounds N`` measures what tracing
costs (docs/design/tracing.md): N rounds, each of four extenders on freshly seeded clusters, in an
order that rotates every round: tracing compiled out (the extender started through this script,
which first replaces the ``hami.core.tracing`` entry points the hot path calls by no-op stubs),
tracing off, and ``--enable-tracing`` with each of ``--tracing-ratios`` (default 1.0 and 0.1: the
share of pods whose trace is sampled; spans exported over OTLP/HTTP to a sink in this process;
each pod carrying a trace context that verifies). It prints the extender CPU per pod of each, the
difference off minus compiled out beside the rounds' own spread, and the ratios of tracing on to
off.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from hami.core import tracing
from hami.testing import tracecost
from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.extender import LISTENING
from hami.testing.jsonhttp import Conn
from hami.testing.kubeapi import SERVING
from hami.testing.otlpsink import OtlpSink
from hami.testing.processes import ProcessGroup, cpu_seconds, cpu_times
from hami.testing.wait import wait_until

LOCK = "hami.io/mutex.lock"
KEY = "bench-trace-key"  # the extender's HAMI_TRACE_KEY with --enable-tracing
COMPILED_OUT = "--as-extender-without-tracing"


def scrape(metrics_url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Sample values of the extender's /metrics by sample name and labels."""
    return parse(requests.get(f"{metrics_url}/metrics", timeout=30).text)


def parse(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def total(sample: dict[str, dict[Any, float]], name: str, **labels: str) -> float:
    return sum(
        v for k, v in sample.get(name, {}).items() if all(dict(k).get(n) == x for n, x in labels.items())
    )


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000


def signed_pod(pod: dict[str, Any], ratio: float) -> dict[str, Any]:
    """``pod`` with the trace context the webhook would have written (as the bench's key), sampled
    with probability ``ratio`` as a ``parentbased_traceidratio`` webhook samples it."""
    sampled = secrets.randbelow(1 << 30) < ratio * (1 << 30)
    traceparent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-{'01' if sampled else '00'}"
    namespace = pod["metadata"].get("namespace", "default")
    annotations = pod["metadata"].setdefault("annotations", {})
    annotations[tracing.ANNOTATION] = tracing.signed(KEY.encode(), namespace, traceparent)
    return pod


def seed(
    api_url: str, nodes: int, pods: int, ratio: float = 1.0
) -> tuple[list[str], list[dict[str, Any]]]:
    conn = Conn(api_url)
    names = [f"node-{i:04d}" for i in range(nodes)]
    for name in names:
        conn.call("POST", "/api/v1/nodes", json.dumps(gpu_node(name, gpus=8, mem=15360)).encode())
    created = [
        conn.call(
            "POST",
            "/api/v1/namespaces/default/pods",
            json.dumps(signed_pod(gpu_pod(f"p{i}", mem=2048, cores=10), ratio)).encode(),
        )
        for i in range(pods)
    ]
    return names, created


def handshakes_written(api_url: str, count: int) -> bool:
    items = requests.get(f"{api_url}/api/v1/nodes", timeout=60).json()["items"]
    return len(items) == count and all(
        (i["metadata"].get("annotations") or {}).get("hami.io/node-handshake") for i in items
    )


def idle_tick(metrics_url: str, ticks: int) -> tuple[float, float]:
    """(API calls per full register pass, seconds per pass) over ``ticks`` idle passes."""

    def passes(s: dict[str, dict[Any, float]]) -> float:
        return total(s, "hami_scheduler_register_duration_seconds_count")

    def spent(s: dict[str, dict[Any, float]]) -> float:
        return total(s, "hami_scheduler_register_duration_seconds_sum")

    def after(count: float, timeout: float) -> dict[str, dict[Any, float]]:
        def scraped() -> dict[str, dict[Any, float]] | None:
            s = scrape(metrics_url)
            return s if passes(s) >= count else None

        # Scrapes are polled slowly: each one is a large render in the extender.
        return wait_until(scraped, timeout, "register passes", interval=0.5)

    # Start right after a pass, so the window holds whole passes and the writes between them.
    s0 = after(passes(scrape(metrics_url)) + 1, 60)
    s1 = after(passes(s0) + ticks, 30 * ticks + 30)
    n = passes(s1) - passes(s0)
    calls = total(s1, "rest_client_requests_total") - total(s0, "rest_client_requests_total")
    return calls / n, (spent(s1) - spent(s0)) / n


def quiet(pid: int, settle: float = 0.5, timeout: float = 60.0) -> None:
    """Wait until ``pid`` stops using CPU (the extender's event queue has drained). Polling its
    /metrics instead would cost it far more CPU than the events: one scrape renders every
    per-device series of the cluster."""
    deadline = time.monotonic() + timeout
    last = cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(settle)
        now = cpu_seconds(pid)
        if now - last < 0.02:
            return
        last = now


UNLOCK = json.dumps({"metadata": {"annotations": {LOCK: None}}}).encode()


def filter_body(pod: dict[str, Any], names_json: bytes) -> bytes:
    return b'{"Pod":' + json.dumps(pod).encode() + b',"NodeNames":' + names_json + b"}"


def bind_body(pod: dict[str, Any], node: str) -> bytes:
    meta = pod["metadata"]
    args = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
    return json.dumps(args).encode()


def release_lock(api: Conn, node: str) -> None:
    """What the device plugin's Allocate does after a bind: drop the node lock."""
    api.call("PATCH", f"/api/v1/nodes/{node}", UNLOCK, "application/merge-patch+json")


def run_threads(
    targets: dict[str, Callable[[], None]],
    count: dict[str, int],
    on_failure: Callable[[], None] = lambda: None,
) -> tuple[Callable[[str], None], list[BaseException]]:
    """Start ``count[name]`` threads of each target; returns ``join(name)``, which waits for one kind,
    and the list the threads' exceptions go to (raise the first instead of reporting a short count)."""
    failures: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as err:
                failures.append(err)
                on_failure()
        return run

    threads = {
        name: [threading.Thread(target=guarded(t), name=f"bench-{name}") for _ in range(count[name])]
        for name, t in targets.items()
    }
    for group in threads.values():
        for th in group:
            th.start()

    def join(name: str) -> None:
        for th in threads[name]:
            th.join()

    return join, failures


def load(
    ext_url: str, api_url: str, names: list[str], pods: list[dict[str, Any]], clients: int
) -> tuple[list[float], list[float], int]:
    """Filter + bind every pod with ``clients`` threads; (filter s, bind s, lock retries)."""
    names_json = json.dumps(names).encode()
    work: queue.Queue[dict[str, Any]] = queue.Queue()
    for p in pods:
        work.put(p)
    filter_s: list[float] = []
    bind_s: list[float] = []
    retries = [0]
    guard = threading.Lock()

    def client() -> None:
        ext, api = Conn(ext_url), Conn(api_url)
        while True:
            try:
                pod = work.get_nowait()
            except queue.Empty:
                return
            body = filter_body(pod, names_json)
            while True:
                t = time.monotonic()
                node = ext.call("POST", "/filter", body)["NodeNames"][0]
                t2 = time.monotonic()
                error = ext.call("POST", "/bind", bind_body(pod, node))
                t3 = time.monotonic()
                with guard:
                    filter_s.append(t2 - t)
                    bind_s.append(t3 - t2)
                if not error["Error"]:
                    release_lock(api, node)
                    break
                with guard:
                    retries[0] += 1

    join, failures = run_threads({"client": client}, {"client": clients})
    join("client")
    if failures:
        raise failures[0]
    return filter_s, bind_s, retries[0]


def load_pipelined(
    ext_url: str, api_url: str, names: list[str], pods: list[dict[str, Any]], binders: int
) -> tuple[list[float], list[float], int]:
    """kube-scheduler's shape: one scheduling loop filters pods one at a time and hands each chosen
    node to ``binders`` binding threads (its asynchronous binding cycle); (filter s, bind s, retries)."""
    names_json = json.dumps(names).encode()
    todo: queue.Queue[dict[str, Any]] = queue.Queue()
    for p in pods:
        todo.put(p)
    chosen: queue.Queue[tuple[dict[str, Any], str] | None] = queue.Queue()
    filter_s: list[float] = []
    bind_s: list[float] = []
    retries = [0]
    left = [len(pods)]
    guard = threading.Lock()

    def schedule() -> None:
        ext = Conn(ext_url)
        while pod := todo.get():  # {} ends the loop
            t = time.monotonic()
            node = ext.call("POST", "/filter", filter_body(pod, names_json))["NodeNames"][0]
            filter_s.append(time.monotonic() - t)
            chosen.put((pod, node))

    def bind() -> None:
        ext, api = Conn(ext_url), Conn(api_url)
        while (item := chosen.get()) is not None:
            pod, node = item
            t = time.monotonic()
            error = ext.call("POST", "/bind", bind_body(pod, node))
            with guard:
                bind_s.append(time.monotonic() - t)
            if error["Error"]:
                with guard:
                    retries[0] += 1
                todo.put(pod)
                continue
            release_lock(api, node)
            with guard:
                left[0] -= 1
                if not left[0]:
                    todo.put({})

    join, failures = run_threads(
        {"scheduler": schedule, "binder": bind}, {"scheduler": 1, "binder": binders},
        on_failure=lambda: todo.put({}),
    )
    join("scheduler")
    for _ in range(binders):
        chosen.put(None)
    join("binder")
    if failures:
        raise failures[0]
    return filter_s, bind_s, retries[0]


def profile_in_background(metrics_url: str, seconds: int, out: Path) -> Callable[[], None]:
    """Start fetching a CPU profile now; the returned callable waits for it and saves it."""
    box: list[requests.Response] = []
    th = threading.Thread(
        target=lambda: box.append(
            requests.get(f"{metrics_url}/debug/pprof/profile?seconds={seconds}", timeout=seconds + 60)
        ),
        daemon=True,
    )
    th.start()

    def finish() -> None:
        th.join(seconds + 90)
        if not box:
            print(f"CPU profile ({seconds}s): no answer from {metrics_url}/debug/pprof/profile")
        elif not box[0].ok:  # an error body saved as a profile would only puzzle pprof
            print(f"CPU profile ({seconds}s): HTTP {box[0].status_code}: {box[0].text[:200]}")
        else:
            out.write_bytes(box[0].content)
            print(f"CPU profile ({seconds}s) saved: go tool pprof -top {out}")

    return finish


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--pipeline", action="store_true",
                        help="one filter at a time, --clients threads bind (kube-scheduler's shape)")
    parser.add_argument("--node-policy", default="spread")
    parser.add_argument("--idle-ticks", type=int, default=1, help="idle register passes (15 s each)")
    parser.add_argument("--pprof", type=int, default=0, help="CPU profile seconds during the load")
    parser.add_argument("--pprof-out", type=Path, default=Path("extender.pprof"))
    parser.add_argument("--profiling", action="store_true", help="the extender with --profiling, no profile")
    parser.add_argument("--profiling-rounds", type=int, default=0,
                        help="rounds alternating without and with --profiling; prints the CPU ratio")
    parser.add_argument("--heap-from-start", action="store_true",
                        help="with --profiling, also --profiling.heap-from-start (tracing from start-up)")
    parser.add_argument("--tracing-rounds", type=int, default=0,
                        help="rounds of: tracing compiled out, off, on at each --tracing-ratios; prints CPU")
    parser.add_argument("--tracing-ratios", default="1.0,0.1",
                        help="with --tracing-rounds, the shares of pods sampled (the webhook's decision)")
    parser.add_argument("-v", type=int, default=0, help="the extender's log verbosity")
    parser.add_argument("--in-process", action="store_true", help="the single-process variant")
    parser.add_argument("--real", action="store_true",
                        help="through the real kube-scheduler and kube-apiserver (bench_extender_real.py)")
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == [COMPILED_OUT]:  # this script as the extender (``run(stubbed=True)``)
        return extender_without_tracing(given[1:])
    args, rest = parser.parse_known_args(argv)
    if args.real:
        script = Path(__file__).with_name("bench_extender_real.py")
        rest_argv = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--real"]
        return subprocess.call([sys.executable, str(script), *rest_argv])
    if args.in_process:
        script = Path(__file__).with_name("bench_extender_inprocess.py")
        rest_argv = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--in-process"]
        return subprocess.call([sys.executable, str(script), *rest_argv])
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.tracing_rounds:
        return tracing_rounds(args)
    if not args.profiling_rounds:
        run(args, args.profiling or bool(args.pprof))
        return 0
    with_ = "--profiling" + (" --profiling.heap-from-start" if args.heap_from_start else "")
    target = "" if args.heap_from_start else " (target <= 1.05x)"  # the opt-in's price has none
    off: list[float] = []
    on: list[float] = []
    for i in range(args.profiling_rounds):
        # ABBA: the order flips every round, so a drift over the sitting (other load, the cache
        # warming) does not land on one side
        for profiling in (False, True) if i % 2 == 0 else (True, False):
            (on if profiling else off).append(run(args, profiling))
    for i, (a, b) in enumerate(zip(off, on, strict=True), 1):
        print(f"round {i}: extender CPU per pod {a:.2f} ms without {with_}, {b:.2f} ms with: "
              f"{b / a:.3f}x{target}")
    print(f"{with_} / off, extender CPU per pod over {len(off)} rounds: {sum(on) / sum(off):.3f}x{target}")
    return 0


def extender_without_tracing(argv: list[str]) -> int:
    """``python -m hami.scheduler ARGV`` with the tracing entry points of the filter, bind, pod
    handlers and scrapes replaced by stubs that do nothing: the baseline with tracing compiled out.
    The stubs keep the real signatures, so a call costs what calling an empty function costs."""
    from hami.scheduler.extender.main import main as extender_main

    def now_ns() -> int:
        return 0

    def pod_span(name: str, pod: Any, start_ns: int = 0, attributes: Any = None, *,
                 bound_only: bool = False, admit: Any = None) -> None:
        return None

    def own_span(name: str, attributes: Any = None) -> None:
        return None

    def phase(parent: Any, name: str, start_ns: int, end_ns: int, attributes: Any = None) -> None:
        return None

    def end(span: Any, error: str = "", attributes: Any = None) -> None:
        return None

    def exemplar(span: Any) -> None:
        return None

    def enabled() -> bool:
        return False

    for stub in (now_ns, pod_span, own_span, phase, end, exemplar, enabled):
        setattr(tracing, stub.__name__, stub)
    return extender_main(argv)


def tracing_rounds(args: argparse.Namespace) -> int:
    """Extender CPU per pod with tracing compiled out, off, and on at each ratio; the order of the
    variants rotates every round, so a drift over the sitting does not land on one variant."""
    variants = tracecost.variants([float(r) for r in args.tracing_ratios.split(",")])
    cpu: dict[str, list[float]] = {name: [] for name, _ in variants}
    with OtlpSink() as sink:
        for i in range(args.tracing_rounds):
            for name, ratio in tracecost.rotated(variants, i):
                print(f"--- round {i + 1}: tracing {name}")
                traced = sink if ratio is not None else None
                cpu[name].append(run(args, False, traced, 1.0 if ratio is None else ratio,
                                     stubbed=name == "compiled out"))
        exported = sum(len(cpu[name]) for name, r in variants if r is not None) * args.pods
        print(f"OTLP export: {sink.requests} requests, {sink.received / max(exported, 1):.0f} bytes per pod "
              "traced (sampled or not)")

    print("\n".join(tracecost.summary("extender CPU per pod", "pod", cpu, variants)))
    return 0


def profiling_flags(args: argparse.Namespace, profiling: bool) -> list[str]:
    if not profiling:
        return []
    return ["--profiling", *(["--profiling.heap-from-start"] if args.heap_from_start else [])]


def run(
    args: argparse.Namespace, profiling: bool, sink: OtlpSink | None = None, ratio: float = 1.0,
    *, stubbed: bool = False,
) -> float:
    """One bench on a freshly seeded cluster; prints its figures, returns the extender's CPU ms
    per pod. With ``sink``: the extender traces the pods into it, ``ratio`` of them sampled.
    ``stubbed``: the extender with tracing compiled out (``extender_without_tracing``)."""
    with tempfile.TemporaryDirectory(prefix="bench-extender-") as tmp:
        workdir = Path(tmp)
        kubeconfig = workdir / "kubeconfig"
        children = ProcessGroup(workdir)
        try:
            emulator = children.python(
                "kubeapi",
                "hami.testing.kubeapi",
                ["--port=0", f"--kubeconfig={kubeconfig}", "--history=20000"],
            )
            api_url = children.wait_for_log(emulator, SERVING, 120, "the API emulator").group(1)
            started = time.monotonic()
            names, pods = seed(api_url, args.nodes, args.pods, ratio)
            print(f"cluster: {args.nodes} nodes x 8 GPUs, {args.pods} pods; seeded over HTTP in "
                  f"{time.monotonic() - started:.1f}s")
            flags = [
                f"--kubeconfig={kubeconfig}", "--http_bind=127.0.0.1:0", "--metrics-bind-address=127.0.0.1:0",
                "--kube-qps=-1", f"--node-scheduler-policy={args.node_policy}", f"-v={args.v}",
            ]
            started = time.monotonic()
            traced = ["--enable-tracing"] if sink is not None else []
            env = {
                "HAMI_TRACE_KEY": KEY, "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url,
                "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                "OTEL_TRACES_SAMPLER_ARG": str(ratio),
            } if sink is not None else None
            # --pprof reads /debug/pprof, which only --profiling serves
            argv = [*flags, *profiling_flags(args, profiling or args.pprof > 0), *traced]
            if stubbed:
                extender = children.start(
                    "extender", [sys.executable, "-u", __file__, COMPILED_OUT, *argv], env
                )
            else:
                extender = children.python("extender", "hami.scheduler", argv, env)
            found = children.wait_for_log(extender, LISTENING, 120, "the extender")
            ext_url, metrics_url = found.group(1), found.group(2)
            wait_until(
                lambda: requests.get(f"{metrics_url}/readyz", timeout=10).ok, timeout=300, what="ready"
            )
            wait_until(lambda: handshakes_written(api_url, args.nodes), timeout=300, what="handshakes")
            print(f"extender: ready and every handshake written in {time.monotonic() - started:.1f}s")
            if args.idle_ticks > 0:
                calls, seconds = idle_tick(metrics_url, args.idle_ticks)
                print(f"idle register tick: {calls:.1f} API calls/tick (target 0), "
                      f"{seconds * 1000:.1f} ms/tick ({args.idle_ticks} full passes)")

            pids = {"extender": extender.proc.pid, "kubeapi": emulator.proc.pid, "bench": os.getpid()}
            before = scrape(metrics_url)
            cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
            sys0 = cpu_times(extender.proc.pid)[1]
            finish = profile_in_background(metrics_url, args.pprof, args.pprof_out) if args.pprof else None
            t0 = time.monotonic()
            drive = load_pipelined if args.pipeline else load
            filter_s, bind_s, retries = drive(ext_url, api_url, names, pods, args.clients)
            wall = time.monotonic() - t0
            bench_cpu = cpu_seconds(os.getpid()) - cpu0["bench"]
            quiet(extender.proc.pid)
            cpu = {k: cpu_seconds(p) - cpu0[k] for k, p in pids.items()} | {"bench": bench_cpu}
            ext_sys = cpu_times(extender.proc.pid)[1] - sys0
            # The request alone: while this process parses the body, the extender's own threads
            # (watches, register ticks) would be charged to the scrape.
            scrape_cpu = cpu_seconds(extender.proc.pid)
            t_scrape = time.monotonic()
            body = requests.get(f"{metrics_url}/metrics", timeout=30).text
            scrape_wall = time.monotonic() - t_scrape
            scrape_cpu = cpu_seconds(extender.proc.pid) - scrape_cpu
            after = parse(body)
            if finish is not None:
                finish()
        finally:
            children.stop()

    n: int = args.pods
    print(f"end-to-end: {n / wall:.0f} pods/s (target >= 200; {n} pods in {wall:.2f}s, "
          f"{args.clients} clients, node policy {args.node_policy}), {retries} lock retries"
          + (f", extender with {' '.join(profiling_flags(args, profiling))}" if profiling else "")
          + (", extender CPU-profiled" if args.pprof else "")
          + (", extender with --enable-tracing" if sink is not None else ""))
    print(f"filter latency ms: p50 {pct(filter_s, 0.5):.1f} p99 {pct(filter_s, 0.99):.1f}; "
          f"bind latency ms: p50 {pct(bind_s, 0.5):.1f} p99 {pct(bind_s, 0.99):.1f}")
    by_verb = {
        verb: (total(after, "rest_client_requests_total", method=verb)
               - total(before, "rest_client_requests_total", method=verb)) / n
        for verb in ("GET", "POST", "PATCH", "PUT", "DELETE")
    }
    events = {
        r: total(after, "hami_kube_events_total", result=r)
        - total(before, "hami_kube_events_total", result=r)
        for r in ("created", "aggregated", "dropped", "error")
    }
    print(f"extender API requests per pod: {sum(by_verb.values()):.2f} ("
          + ", ".join(f"{v} {c:.2f}" for v, c in by_verb.items() if c) + "); events per pod: "
          + ", ".join(f"{r} {c / n:.2f}" for r, c in events.items() if c))
    print("CPU ms per pod: " + ", ".join(f"{k} {c / n * 1000:.2f}" for k, c in cpu.items())
          + f"; total {sum(cpu.values()) / n * 1000:.2f} (wall ms per pod {wall / n * 1000:.2f}, "
          f"{os.cpu_count()} CPUs)")
    print(f"extender CPU per pod: {(cpu['extender'] - ext_sys) / n * 1000:.2f} ms user, "
          f"{ext_sys / n * 1000:.2f} ms system")
    print(f"extender alone on one core: {n / cpu['extender']:.0f} pods/s")
    writes = sum(c for v, c in by_verb.items() if v != "GET")
    print(f"extender API writes per pod: {writes:.2f} (target <= 4: {writes / 4:.2f}x of target)")
    ratio = cpu["extender"] / cpu["kubeapi"] if cpu["kubeapi"] else float("inf")
    print(f"extender CPU per pod / API emulator CPU per pod: {ratio:.2f}x (target <= 1.5x: "
          f"{ratio / 1.5:.2f}x of target)")
    series = sum(len(v) for v in after.values())
    print(f"one /metrics scrape: {series} samples, {scrape_wall * 1000:.0f} ms wall "
          f"(gzip, decoded by the client), extender CPU {scrape_cpu * 1000:.0f} ms (target <= 30 ms at 1,000 "
          f"nodes x 8 GPUs: {scrape_cpu * 1000 / 30:.2f}x of target), "
          f"{scrape_cpu / max(series, 1) * 1e6:.2f} us/sample")
    return cpu["extender"] / n * 1000


if __name__ == "__main__":
    sys.exit(main())
