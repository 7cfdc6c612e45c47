import gzip
import os
import shutil
import subprocess
import threading
import time
import tracemalloc
from collections.abc import Iterator

import pytest
import requests
from prometheus_client import CollectorRegistry

from hami.core.profiling import (
    add_heap_from_start_flag,
    add_profiling_flag,
    check_profiling_flags,
    start_tracing,
)
from hami.core.profiling.pprof_proto import Frame, ProfileBuilder, _varint
from hami.core.serve import Server, serve_metrics

GO = shutil.which("go")


class Busy:
    """A thread burning CPU and holding memory in a function with a recognisable name."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.kept: list[bytearray] = []
        self.loops = 0
        self.thread = threading.Thread(target=self.busy_hami_worker, name="busy", daemon=True)

    def busy_hami_worker(self) -> None:
        while not self.stop.is_set():
            total = 0
            for i in range(20_000):
                total += i * i
            self.kept.append(bytearray(4096))
            if len(self.kept) > 500:
                del self.kept[:250]
            self.loops += 1


def test_heap_window_traces_only_while_profiling() -> None:
    """An idle `--profiling` daemon pays nothing: tracemalloc runs only inside a heap window."""
    from hami.core.profiling import heap

    if tracemalloc.is_tracing():
        pytest.skip("tracemalloc already running in this process (PYTHONTRACEMALLOC)")
    srv = serve_metrics("127.0.0.1:0", CollectorRegistry(), profiling=True)
    try:
        assert not tracemalloc.is_tracing()
        windows: list[float] = []

        def wait(seconds: float) -> None:
            assert tracemalloc.is_tracing()
            windows.append(seconds)
            kept.append(bytearray(1 << 20))

        kept: list[bytearray] = []
        data, window = heap.heap_profile("inuse_space", wait=wait)
        assert windows == [heap.DEFAULT_WINDOW_S]
        assert window.startswith(f"{heap.DEFAULT_WINDOW_S}s: allocations traced during the window")
        assert gzip.decompress(data)
        assert not tracemalloc.is_tracing()
        heap.heap_profile("inuse_space", seconds=2, wait=wait)
        assert windows[-1] == 2 and not tracemalloc.is_tracing()
    finally:
        srv.stop()


def kept_before_the_request(kept: list[bytearray]) -> None:
    kept.append(bytearray(1 << 20))


def test_heap_from_start_shows_what_was_allocated_before_the_request() -> None:
    """--profiling.heap-from-start: what start_tracing saw before the request is in a plain heap
    profile; a window (tracing started by the request) cannot see it."""
    from hami.core.profiling import heap

    if tracemalloc.is_tracing():
        pytest.skip("tracemalloc already running in this process (PYTHONTRACEMALLOC)")
    kept: list[bytearray] = []
    kept_before_the_request(kept)
    data, _ = heap.heap_profile("inuse_space", seconds=1, wait=lambda _s: None)
    assert b"kept_before_the_request" not in gzip.decompress(data)
    start_tracing()
    try:
        kept_before_the_request(kept)
        assert "since start-up" in heap.tracing_state()
        data, window = heap.heap_profile("inuse_space", wait=lambda _s: None)
        assert window == "since start-up: every block still alive"
        assert b"test_profiling.kept_before_the_request" in gzip.decompress(data)
        _, window = heap.heap_profile("inuse_space", seconds=3, wait=lambda _s: None)
        assert window.startswith("3s: growth over the window")
    finally:
        tracemalloc.stop()
    assert heap.tracing_state().startswith("not tracing")


def test_heap_windows_do_not_nest() -> None:
    from hami.core.profiling import heap

    if tracemalloc.is_tracing():
        pytest.skip("tracemalloc already running in this process (PYTHONTRACEMALLOC)")
    inner: list[BaseException] = []

    def wait(_: float) -> None:
        try:
            heap.heap_profile("inuse_space", wait=lambda _s: None)
        except heap.HeapProfileBusy as e:
            inner.append(e)

    heap.heap_profile("inuse_space", seconds=1, wait=wait)
    assert len(inner) == 1 and "already being taken" in str(inner[0])
    assert not tracemalloc.is_tracing()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    busy = Busy()
    srv = serve_metrics("127.0.0.1:0", CollectorRegistry(), profiling=True)
    busy.thread.start()
    try:
        yield srv
    finally:
        busy.stop.set()
        busy.thread.join(10)
        srv.stop()


@pytest.fixture(scope="module")
def go_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if GO is None:
        pytest.skip("go is not installed (Debian package go-bin / golang-go)")
    home = tmp_path_factory.mktemp("gohome")
    return dict(os.environ, HOME=str(home), GOCACHE=str(home / "cache"), GOPATH=str(home / "gopath"),
                PPROF_TMPDIR=str(home / "pprof"))


def pprof(go_env: dict[str, str], *args: str) -> str:
    assert GO is not None
    done = subprocess.run([GO, "tool", "pprof", *args], capture_output=True, text=True, env=go_env,
                          timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("path, kind", [
    ("profile?seconds=2", "Type: cpu"),
    ("heap?seconds=2", "Type: inuse_space"),
    ("allocs?seconds=2", "Type: alloc_space"),
    ("goroutine", "Type: goroutine"),
])
def test_go_tool_pprof_reads_our_profiles(server: Server, go_env: dict[str, str], path: str,
                                          kind: str) -> None:
    out = pprof(go_env, "-top", f"{server.url}/debug/pprof/{path}")
    assert kind in out
    assert "test_profiling.Busy.busy_hami_worker" in out


def sleepy_hami_sleeper(stop: threading.Event) -> None:
    while not stop.wait(0.05):
        pass


def bursty_hami_work() -> None:
    total = 0
    for i in range(10_000):
        total += i * i


def idle_hami_pause() -> None:
    time.sleep(0.001)


def bursty_hami_loop(stop: threading.Event) -> None:
    while not stop.is_set():
        bursty_hami_work()
        idle_hami_pause()


def cum_ms(top: str, name: str) -> float:
    """The cum column of `go tool pprof -top` for function `name` (0 when absent)."""
    for line in top.splitlines():
        fields = line.split()
        if len(fields) == 6 and fields[5] == name:
            value = fields[3]
            if value.endswith("ms"):
                return float(value.removesuffix("ms"))
            return float(value.removesuffix("s")) * 1e3
    return 0.0


def test_cpu_profile_shows_running_threads_only(server: Server, go_env: dict[str, str]) -> None:
    """A blocked thread costs no CPU and shows nowhere; a thread that alternates work and short
    sleeps is charged to its work, not to the sleep it is in whenever the sampler looks."""
    stop = threading.Event()
    threads = [threading.Thread(target=f, args=(stop,), daemon=True)
               for f in (sleepy_hami_sleeper, bursty_hami_loop)]
    for t in threads:
        t.start()
    try:
        top = pprof(go_env, "-top", f"{server.url}/debug/pprof/profile?seconds=3")
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    module = "tests.core.test_profiling"
    assert cum_ms(top, f"{module}.Busy.busy_hami_worker") > 0, top
    assert f"{module}.sleepy_hami_sleeper" not in top
    work, pause = cum_ms(top, f"{module}.bursty_hami_work"), cum_ms(top, f"{module}.idle_hami_pause")
    # Charging each interval's CPU to wherever the thread is at the tick puts nearly all of it
    # in the pause; sampling only running threads puts most of it in the work (on a contended
    # machine some CPU of a thread waking from the pause still lands there, so no fixed ratio).
    assert work > pause, top


def test_pprof_list_shows_python_source(server: Server, go_env: dict[str, str]) -> None:
    # The `list FUNC` of docs/guides/profiling.md §2.1: pprof reads the source file named in the profile.
    out = pprof(go_env, "-list", "busy_hami_worker", f"{server.url}/debug/pprof/profile?seconds=1")
    assert "ROUTINE ======================== tests.core.test_profiling.Busy.busy_hami_worker" in out
    assert "total += i * i" in out


def test_heap_growth_over_seconds(server: Server, go_env: dict[str, str]) -> None:
    out = pprof(go_env, "-top", "-sample_index=inuse_objects", f"{server.url}/debug/pprof/heap?seconds=1")
    assert "Duration: 1s" in out


def test_goroutine_text(server: Server) -> None:
    grouped = requests.get(f"{server.url}/debug/pprof/goroutine?debug=1", timeout=30).text
    assert grouped.startswith("goroutine profile: total ")
    assert "#\ttests.core.test_profiling.Busy.busy_hami_worker\t" in grouped
    full = requests.get(f"{server.url}/debug/pprof/goroutine?debug=2", timeout=30).text
    block = next(b for b in full.split("\n\n") if "[busy, daemon]:" in b)
    lines = block.splitlines()
    assert lines[0].startswith("goroutine ") and lines[0].endswith(" [busy, daemon]:")
    # Innermost frame first, then its caller chain down to the thread's bootstrap.
    assert lines[1] == "tests.core.test_profiling.Busy.busy_hami_worker(...)"
    assert lines[2].startswith(f"\t{__file__}:")
    assert lines[-2] == "threading.Thread._bootstrap(...)"


def test_index_and_errors(server: Server) -> None:
    index = requests.get(f"{server.url}/debug/pprof/", timeout=30)
    assert index.status_code == 200 and 'href="profile"' in index.text and 'href="heap"' in index.text
    assert "heap: not tracing" in index.text or tracemalloc.is_tracing()
    assert requests.get(f"{server.url}/debug/pprof", timeout=30).status_code == 200
    bad = requests.get(f"{server.url}/debug/pprof/profile?seconds=abc", timeout=30)
    assert bad.status_code == 400 and "seconds='abc'" in bad.text
    assert requests.get(f"{server.url}/debug/pprof/goroutine?debug=7", timeout=30).status_code == 400
    assert requests.get(f"{server.url}/debug/pprof/nope", timeout=30).status_code == 404


def test_one_cpu_profile_at_a_time(server: Server) -> None:
    results: list[int] = []

    def fetch() -> None:
        results.append(requests.get(f"{server.url}/debug/pprof/profile?seconds=2", timeout=60).status_code)

    threads = [threading.Thread(target=fetch) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Either both ran one after the other, or the second was refused as Go refuses it.
    assert sorted(results) in ([200, 200], [200, 500])


def test_profile_answer_is_gzipped_proto(server: Server) -> None:
    r = requests.get(f"{server.url}/debug/pprof/heap?seconds=1", timeout=60)
    assert r.headers["Content-Type"] == "application/octet-stream"
    assert r.headers["X-Heap-Window"].startswith("1s: allocations traced during the window and still alive")
    # requests does not undo Content-Encoding we never set: the body itself is gzip (magic 1f 8b).
    assert r.content[:2] == b"\x1f\x8b"
    assert gzip.decompress(r.content)


def test_varint_and_string_table() -> None:
    assert _varint(0) == b"\x00"
    assert _varint(300) == b"\xac\x02"
    assert _varint(-1) == b"\xff" * 9 + b"\x01"  # int64 -1 is ten bytes on the wire
    builder = ProfileBuilder([("samples", "count")], ("samples", "count"), 1)
    builder.add([Frame("m.f", "/x.py", 1, 2)], [5])
    builder.add([Frame("m.f", "/x.py", 1, 2)], [2])
    data = builder.encode()
    # The first string-table entry (field 6) is the empty string.
    assert b"\x32\x00" in data
    with pytest.raises(ValueError, match="expected 1 values"):
        builder.add([], [1, 2])


def test_profiling_flag() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_profiling_flag(parser)
    add_heap_from_start_flag(parser)
    assert parser.parse_args([]).profiling is False
    assert parser.parse_args(["--profiling"]).profiling is True
    args = parser.parse_args(["--profiling", "--profiling.heap-from-start"])
    assert args.profiling_heap_from_start is True
    check_profiling_flags(parser, args)
    check_profiling_flags(parser, parser.parse_args(["--profiling"]))
    with pytest.raises(SystemExit):
        check_profiling_flags(parser, parser.parse_args(["--profiling.heap-from-start"]))
