"""Child processes for the demo, the integration tests and the benchmarks: logged to files (a
``ProcessGroup``, stopped in reverse order: SIGTERM, then SIGKILL after a grace period) or with their
stderr kept in memory (a ``Daemon``, for tests that read its log lines), and their CPU use."""

from __future__ import annotations

import errno
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import requests

import hami
from hami.testing.wait import wait_until

SRC = str(Path(hami.__file__).resolve().parents[1])
CLK_TCK = os.sysconf("SC_CLK_TCK")


# The locale variables that choose the language of a child's messages (gettext reads LANGUAGE first).
_LOCALE_VARS = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")


def untranslated(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` for a child whose messages we parse (bash, kubectl, promtool): ``LC_ALL=C.UTF-8``
    and no ``LANGUAGE``, so they are never translated whatever the caller's locale, and stay UTF-8."""
    env = {k: v for k, v in environ.items() if k not in _LOCALE_VARS}
    env["LC_ALL"] = env["LANG"] = "C.UTF-8"
    return env


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


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PICKED_PORT = 10000
_handed_out: set[int] = set()
_picker = random.Random()  # seeded per process from the OS: two test runs start apart
_pick_lock = threading.Lock()


def _pick_range() -> range:
    """Ports below the kernel's ephemeral range, where no outbound connection takes one."""
    try:
        low = int(EPHEMERAL_RANGE.read_text(encoding="utf-8").split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    return range(LOWEST_PICKED_PORT, max(low, LOWEST_PICKED_PORT + 1000))


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, for a child to bind a moment later.

    A port the OS hands out for ``bind(0)`` comes from the ephemeral range, and between our
    release and the child's bind any outbound connection on the machine (Prometheus scraping,
    a Go client dialling) may take it: CI saw "Address already in use" that way. So the port is
    drawn below that range, never twice in one process, and checked bindable now.
    """
    ports = _pick_range()
    with _pick_lock:
        for _ in range(200):
            port = _picker.choice(ports)
            if port in _handed_out or port_problem(host, port) is not None:
                continue
            _handed_out.add(port)
            return port
    raise StartError(f"no free port on {host} in {ports.start}-{ports.stop - 1} after 200 tries")


def log_tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
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
    """Starts children with their output in ``<log_dir>/<name>.log``; ``stop()`` ends them all.
    Their environment: ``env``, by default this one with this ``hami`` on PYTHONPATH."""

    def __init__(self, log_dir: Path, env: Mapping[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.env = python_env() if env is None else dict(env)
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

    def wait_for_log(
        self, child: Child, pattern: str | re.Pattern[str], timeout: float, what: str
    ) -> re.Match[str]:
        """The first match of ``pattern`` in ``child``'s log, once there; StartError if a child exits."""
        return wait_until(log_match(child.log, pattern), timeout, what, alive=self.check_alive, interval=0.1)

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


def http_ok(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return requests.get(url, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    return check


def log_match(path: Path, pattern: str | re.Pattern[str]) -> Callable[[], re.Match[str] | None]:
    """A check for ``wait_until``: the first match of ``pattern`` in the log file (its last MiB)."""
    return lambda: re.search(pattern, log_tail(path, 1 << 20))


def python_env(**extra: str) -> dict[str, str]:
    """This environment with this ``hami`` first on PYTHONPATH, for ``python -m hami...`` children."""
    path = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


class Daemon:
    """A child whose stderr (a daemon's log) a thread reads into ``lines``, searchable while it runs."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=python_env() if env is None else dict(env),
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def log(self) -> str:
        return "\n".join(self.lines)

    def find(self, pattern: str | re.Pattern[str], start: int = 0) -> re.Match[str] | None:
        """The first line from ``lines[start]`` on that matches ``pattern``."""
        for line in self.lines[start:]:
            if m := re.search(pattern, line):
                return m
        return None

    def wait_for_line(
        self, pattern: str | re.Pattern[str], timeout: float = 60.0, start: int = 0
    ) -> re.Match[str]:
        """Waits for a line matching ``pattern``; fails at once, with the log, if the child exits."""

        def alive() -> None:
            if self.proc.poll() is not None:
                self._reader.join(10)  # the lines it wrote before exiting
                if self.find(pattern, start) is None:
                    raise AssertionError(f"exited with status {self.proc.returncode}:\n{self.log()}")

        what = f"a line matching {pattern!r}"
        return wait_until(lambda: self.find(pattern, start), timeout, what, alive=alive)

    def stop(self, grace: float = 30.0) -> int:
        """SIGTERM, then SIGKILL after ``grace`` s; the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)
        finally:
            self._reader.join(10)


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def cpu_seconds(pid: int) -> float:
    return sum(cpu_times(pid))
