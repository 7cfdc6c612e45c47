"""Child processes for the demo and the integration tests: logged to files, waited on with deadlines,
stopped in reverse order (SIGTERM, then SIGKILL after a grace period)."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import requests


class StartError(RuntimeError):
    """A child did not come up; the message names it and quotes the tail of its log."""


def port_problem(host: str, port: int) -> str | None:
    """None when ``host:port`` can be bound now, else why not (for a clear one-line error)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return f"port {port} on {host} is already in use"
            return f"cannot bind {host}:{port}: {err.strerror}"
    return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def log_tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None


class ProcessGroup:
    """Starts children with their output in ``<log_dir>/<name>.log``; ``stop()`` ends them all."""

    def __init__(self, log_dir: Path, env: Mapping[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.env = dict(os.environ if env is None else env)
        self.children: list[Child] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(
        self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> Child:
        log = self.log_dir / f"{name}.log"
        merged = {**self.env, **(env or {})}
        with log.open("wb") as out:
            # own session: Ctrl-C reaches only the orchestrator, which stops the children in order
            proc = subprocess.Popen(
                list(argv), stdout=out, stderr=subprocess.STDOUT, env=merged, cwd=cwd, start_new_session=True
            )
        child = Child(name, proc, log)
        self.children.append(child)
        return child

    def python(
        self, name: str, module: str, args: Sequence[str], env: Mapping[str, str] | None = None
    ) -> Child:
        return self.start(name, [sys.executable, "-u", "-m", module, *args], env)

    def check_alive(self) -> None:
        for child in self.children:
            if not child.alive():
                raise StartError(
                    f"{child.name} exited with status {child.proc.returncode}; "
                    f"log {child.log}:\n{log_tail(child.log)}"
                )

    def stop(self, grace: float = 15.0) -> dict[str, int]:
        """SIGTERM every child, newest first; SIGKILL what is left after ``grace`` s. Returns exit codes."""
        codes: dict[str, int] = {}
        for child in reversed(self.children):
            if child.alive():
                child.proc.send_signal(signal.SIGTERM)
            try:
                codes[child.name] = child.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                child.proc.kill()
                codes[child.name] = child.proc.wait(timeout=grace)
        self.children.clear()
        return codes


def wait_until(
    check: Callable[[], bool], timeout: float, what: str, alive: Callable[[], None] | None = None
) -> None:
    """Polls ``check`` until true; ``alive`` raises when a child died. StartError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None:
            alive()
        if check():
            return
        if time.monotonic() > deadline:
            raise StartError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def http_ok(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return requests.get(url, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    return check


def log_contains(path: Path, text: str) -> Callable[[], bool]:
    return lambda: text in log_tail(path, 1 << 20)
