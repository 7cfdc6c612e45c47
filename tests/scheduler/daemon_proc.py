"""``python -m hami.scheduler`` as a subprocess: its stderr (klog lines) collected, stopped with SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.scheduler.extender_env import wait_until

import hami

SRC = str(Path(hami.__file__).resolve().parents[1])
LISTENING = re.compile(r"hami-scheduler extender on (\S+), metrics on (\S+) ")


class Daemon:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        found = wait_until(self._listening, timeout=60, what="extender listening")
        self.url, self.metrics_url = found.group(1), found.group(2)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def _listening(self) -> re.Match[str] | None:
        if self.proc.poll() is not None and not self._reader.is_alive():
            raise AssertionError("extender exited:\n" + "\n".join(self.lines))
        for line in list(self.lines):
            m = LISTENING.search(line)
            if m:
                return m
        return None

    def log(self) -> str:
        return "\n".join(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(10)


@contextmanager
def daemon(kubeconfig: Path, *flags: str, extra: Sequence[str] = ()) -> Iterator[Daemon]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    args = [
        sys.executable,
        "-m",
        "hami.scheduler",
        f"--kubeconfig={kubeconfig}",
        "--http_bind=127.0.0.1:0",
        "--metrics-bind-address=127.0.0.1:0",
        "--kube-qps=-1",
        *flags,
        *extra,
    ]
    proc = subprocess.Popen(
        args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        d = Daemon(proc)
    except BaseException:
        proc.kill()
        proc.wait(10)
        raise
    try:
        yield d
    finally:
        d.stop()
