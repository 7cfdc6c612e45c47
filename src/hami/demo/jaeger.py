"""Jaeger all-in-one, the trace backend of the tests and the demo (docs/design/tracing.md).

Jaeger v2 (``github.com/jaegertracing/jaeger/cmd/jaeger``, pinned to ``VERSION``) is an
OpenTelemetry Collector with Jaeger's in-memory storage and query API: a real OTLP receiver, not a
fake of ours. It is built from the Go module proxy once and cached under
``~/.cache/hami/jaeger/<version>/bin/jaeger`` (``$HAMI_CACHE`` moves ``~/.cache/hami``), beside
the control plane's binaries: ``python -m hami.demo.jaeger build`` builds it (``.ci/run`` does,
before the tests), and a test skips only when the Go toolchain is absent.

``Jaeger.start`` runs it on free loopback ports from a configuration of our own (Jaeger's defaults
bind fixed ports on every address): OTLP/HTTP in, the query API (``/api/traces/<id>``) and the UI
out, a short batch timeout so a test's spans are queryable within a second.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import requests
import yaml

from hami.core import tracing
from hami.testing.controlplane.build import BuildError, find_go
from hami.testing.processes import ProcessGroup, free_port, http_ok
from hami.testing.wait import wait_until

VERSION: Final = "v1.76.0"
MODULE: Final = "github.com/jaegertracing/jaeger/cmd/jaeger"
BUILD_TIMEOUT_S: Final = 3600.0  # a cold build compiles the Collector and its dependencies


TRACE_KEY: Final = "hami-demo-trace-key"  # the daemons' HAMI_TRACE_KEY in the stack and the demo


def daemon_tracing(endpoint: str) -> tuple[list[str], dict[str, str]]:
    """A daemon's flags and environment to trace into ``endpoint`` (OTLP/HTTP; "": off): every
    span sampled, batches sent every 200 ms, one signing key for the three daemons."""
    if not endpoint:
        return [], {}
    return ["--enable-tracing"], {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OTEL_TRACES_SAMPLER": "parentbased_always_on", tracing.KEY_ENV: TRACE_KEY,
    }


class JaegerBuildError(RuntimeError):
    """The build failed; the message ends with the Go tool's output."""


def cache_dir() -> Path:
    root = Path(os.environ.get("HAMI_CACHE") or Path.home() / ".cache" / "hami")
    return root / "jaeger" / VERSION


def cached() -> Path | None:
    """The built binary, or None."""
    path = cache_dir() / "bin" / "jaeger"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def go_available() -> bool:
    return shutil.which("go") is not None


GO_MIN: Final = (1, 24)  # Jaeger v1.76's go.mod (1.24.6); `go get -tool` too


def toolchain() -> tuple[str, str]:
    """The Go toolchain and the GOTOOLCHAIN for the build: the control plane's finder
    (``find_go``), with Jaeger's minimum: ``local`` for Go 1.24 or later, ``auto`` for Go 1.21 to
    1.23, which then fetches the go.mod's Go from the module proxy (golang.org/toolchain)."""
    try:
        return find_go(GO_MIN, f"Jaeger {VERSION}", f"Jaeger {VERSION}")
    except BuildError as err:
        raise JaegerBuildError(str(err)) from err


def build(timeout: float = BUILD_TIMEOUT_S) -> Path:
    """The cached binary, built first if missing (one build at a time: a lock file)."""
    found = cached()
    if found is not None:
        return found
    if not go_available():
        raise JaegerBuildError(
            "the Go toolchain is not installed (scripts/system-deps.sh installs golang-go)"
        )
    work = cache_dir()
    work.mkdir(parents=True, exist_ok=True)
    with (work / ".lock").open("w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = cached()  # another process built it while this one waited
        if found is not None:
            return found
        go, gotoolchain = toolchain()
        env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": gotoolchain}
        if not (work / "go.mod").exists():
            (work / "go.mod").write_text("module hami.local/jaeger-tool\n\ngo 1.24.6\n", encoding="utf-8")
        for step in (
            [go, "get", "-tool", f"{MODULE}@{VERSION}"], [go, "build", "-o", "bin/jaeger.tmp", MODULE]
        ):
            done = subprocess.run(step, cwd=work, env=env, capture_output=True, text=True, timeout=timeout,
                                  check=False)
            if done.returncode != 0:
                output = (done.stdout + done.stderr)[-3000:]
                raise JaegerBuildError(f"{' '.join(step)} failed in {work}:\n{output}")
        (work / "bin" / "jaeger.tmp").rename(work / "bin" / "jaeger")
    path = cached()
    assert path is not None
    return path


def config(otlp_http: int, query_http: int, query_grpc: int) -> dict[str, Any]:
    """Jaeger's all-in-one pipeline on the given loopback ports, nothing else listening."""
    def local(port: int) -> str:
        return f"127.0.0.1:{port}"

    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"], "processors": ["batch"], "exporters": ["jaeger_storage_exporter"],
                },
            },
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
        },
        "extensions": {
            "jaeger_query": {
                "storage": {"traces": "memory"},
                "http": {"endpoint": local(query_http)},
                "grpc": {"endpoint": local(query_grpc)},
            },
            "jaeger_storage": {"backends": {"memory": {"memory": {"max_traces": 100_000}}}},
        },
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": local(otlp_http)}}}},
        "processors": {"batch": {"timeout": "100ms"}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memory"}},
    }


class Jaeger:
    """A running Jaeger: ``otlp_endpoint`` takes spans, ``query_url`` answers for them."""

    def __init__(self, binary: Path, work: Path, group: ProcessGroup | None = None) -> None:
        self.binary = binary
        self.work = work
        self.group = group or ProcessGroup(work)
        self._own_group = group is None
        self.otlp_endpoint = ""
        self.query_url = ""

    def start(self, timeout: float = 120.0) -> Jaeger:
        ports = [free_port() for _ in range(3)]
        path = self.work / "jaeger.yaml"
        path.write_text(yaml.safe_dump(config(*ports), sort_keys=False), encoding="utf-8")
        self.group.start("jaeger", [str(self.binary), "--config", str(path)])
        self.otlp_endpoint = f"http://127.0.0.1:{ports[0]}"
        self.query_url = f"http://127.0.0.1:{ports[1]}"
        wait_until(http_ok(f"{self.query_url}/api/services"), timeout, "Jaeger's query API",
                   alive=self.group.check_alive, interval=0.2)
        return self

    def stop(self) -> None:
        if self._own_group:
            self.group.stop()

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """The trace as Jaeger's query API returns it (``spans``, ``processes``), or None."""
        r = requests.get(f"{self.query_url}/api/traces/{trace_id}", timeout=10)
        if r.status_code == 404:
            return None
        r.raise_for_status()
        data = r.json().get("data") or []
        return data[0] if data else None

    def __enter__(self) -> Jaeger:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m hami.demo.jaeger build``: build and cache the binary, print its path."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["build"]:
        print("usage: python -m hami.demo.jaeger build", file=sys.stderr)
        return 2
    try:
        print(build())
    except (JaegerBuildError, subprocess.TimeoutExpired) as err:
        print(f"jaeger {VERSION}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
