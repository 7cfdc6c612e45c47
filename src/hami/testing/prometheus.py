"""Debian's real Prometheus for tests and the demo: backfill a TSDB, run a server, stop it.

`backfill_openmetrics` writes blocks with `promtool tsdb create-blocks-from openmetrics`;
`PrometheusServer` starts /usr/bin/prometheus on a free port with a bounded wait for /-/ready.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

from hami.testing.processes import free_port, http_ok
from hami.testing.wait import WaitTimeout, wait_until

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def available() -> bool:
    return Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()


def openmetrics(samples: Iterable[tuple[str, float, float]]) -> str:
    """OpenMetrics text of (series, value, unix seconds) triples; series are `name{labels}` strings."""
    lines = [f"{series} {value!r} {ts:.3f}" for series, value, ts in samples]
    return "\n".join([*lines, "# EOF", ""])


def _shaped(kind: str, arg: float, i: int, points: int, step: int) -> float:
    if kind == "const":
        return arg
    if kind == "peak":  # half of arg, reaching arg once, mid-way
        return arg if i == points // 2 else arg / 2
    if kind == "counter":  # a counter rising by arg per second
        return arg * step * i
    if kind == "steps":  # a counter that reaches arg in two jumps
        return 0.0 if i < points // 3 else (arg / 2 if i < 2 * points // 3 else arg)
    raise ValueError(f"unknown series shape {kind!r}: const, peak, counter or steps")


def recorded(
    scenario: Iterable[tuple[str, str]], start: int, end: int, step: int
) -> Iterator[tuple[str, float, float]]:
    """Samples every ``step`` seconds from ``start`` to ``end`` of (series, "shape:value") pairs, for
    `openmetrics`: shapes const, peak (idles at half, peaks once mid-way), counter (per second) and
    steps (a counter reaching the value in two jumps)."""
    points = (end - start) // step + 1
    for series, spec in scenario:
        kind, arg = spec.split(":")
        for i in range(points):
            yield series, _shaped(kind, float(arg), i, points, step), float(start + i * step)


def held(
    series: Iterable[tuple[str, float, int, int]], start: float, step: float
) -> Iterator[tuple[str, float, float]]:
    """Samples of ``(series, value, first step, last step)`` rows: the value at every step between."""
    for name, value, first, last in series:
        for i in range(first, last + 1):
            yield name, value, float(start + i * step)


def backfill_openmetrics(text: str, data_dir: Path, work_dir: Path) -> None:
    source = work_dir / "backfill.om"
    source.write_text(text, encoding="utf-8")
    out = subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"promtool backfill failed: {out.stdout}{out.stderr}")


class PrometheusServer:
    """A Prometheus process on 127.0.0.1; use as a context manager."""

    def __init__(
        self,
        data_dir: Path,
        config_text: str = "global:\n  scrape_interval: 15s\n",
        ready_timeout: float = 120.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.data_dir = data_dir
        self.config_path = data_dir.parent / f"{data_dir.name}-prometheus.yml"
        self.config_text = config_text
        self.ready_timeout = ready_timeout
        self.extra_args = extra_args
        self.port = 0
        self.log_path = data_dir.parent / f"{data_dir.name}-prometheus.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.config_path.write_text(self.config_text, encoding="utf-8")
        self.port = free_port()
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={self.config_path}",
                    f"--storage.tsdb.path={self.data_dir}",
                    "--storage.tsdb.retention.time=3650d",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    *self.extra_args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        proc = self._proc
        assert proc is not None

        def alive() -> None:
            if proc.poll() is not None:
                said = self.log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
                raise RuntimeError(f"prometheus exited: {said}")

        try:
            wait_until(
                http_ok(f"{self.url}/-/ready"),
                self.ready_timeout,
                "prometheus ready",
                alive=alive,
                interval=0.2,
            )
        except WaitTimeout:
            self.stop()
            raise

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=30)
        self._proc = None

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
