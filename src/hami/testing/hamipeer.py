"""HAMi's own scheduler extender beside ours, for the side-by-side tests and benchmarks.

HAMi's source is a peer to build and run, never code to copy: its path comes from ``HAMI_SRC`` (or a
flag), and whoever uses it says so clearly when it is absent (``ABSENT``) and skips only then.

- ``build(src)``: ``go build ./cmd/scheduler`` into ``~/.cache/hami/hami-scheduler/<key>/scheduler``,
  keyed by HAMi's ``VERSION`` and a digest of its Go sources, so a rebuild happens only when they change.
- ``chart_setup(src)``: what HAMi's own chart (``charts/hami``, rendered by Helm's Go SDK) gives the
  extender container: its command line, its literal environment and ``device-config.yaml``; and the
  KubeSchedulerConfiguration it gives kube-scheduler.
- ``start(...)``: either extender, HAMi's binary or ``python -m hami.scheduler``, with that same
  command line (ours takes HAMi's flags), on loopback ports, its log in a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import helm_python as helm
import requests
import yaml

from hami.testing.controlplane import build as cpbuild
from hami.testing.processes import Child, ProcessGroup, free_port, log_tail
from hami.testing.wait import wait_until

ENV = "HAMI_SRC"
ABSENT = (
    "HAMi's source is absent: set HAMI_SRC (benchmarks: --hami-src) to a HAMi checkout (go.mod, "
    "cmd/scheduler, charts/hami) to compare with HAMi's own scheduler"
)
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hami" / "hami-scheduler"
BUILD_TIMEOUT_S = 1800.0
RELEASE, NAMESPACE = "hami", "kube-system"
EXTENDER_CONTAINER = "vgpu-scheduler-extender"
# Flags the harness sets itself: listeners on loopback ports, the device config written to a file,
# plain HTTP (the test cluster has no cert-manager; both extenders are given the same).
OWN_FLAGS = ("--http_bind", "--cert_file", "--key_file", "--metrics-bind-address", "--device-config-file")


class BuildError(RuntimeError):
    """HAMi's scheduler did not build; the message says why and quotes Go's output."""


def source(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The HAMi checkout from ``explicit`` or ``$HAMI_SRC``; None when unset or not a HAMi tree."""
    value = explicit or os.environ.get(ENV, "")
    if not value:
        return None
    path = Path(value).resolve()
    return path if (path / "cmd" / "scheduler").is_dir() and (path / "go.mod").is_file() else None


def version(src: Path) -> str:
    v = src / "VERSION"
    return v.read_text(encoding="utf-8").strip() if v.is_file() else "unknown"


def build_key(src: Path) -> str:
    """``<VERSION>-<digest>``: the digest covers go.mod, go.sum and every .go file of cmd/ and pkg/."""
    digest = hashlib.sha256()
    files = [src / "go.mod", src / "go.sum"]
    for top in ("cmd", "pkg"):
        files += sorted((src / top).rglob("*.go"))
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(src)).encode() + b"\0" + path.read_bytes() + b"\0")
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", version(src))
    return f"{safe}-{digest.hexdigest()[:12]}"


def build(src: Path, cache: Path = CACHE) -> Path:
    """HAMi's scheduler binary, built once per source (the Go build and module caches are shared)."""
    out = cache / build_key(src) / "scheduler"
    if out.is_file():
        return out
    try:  # the control plane's Go: 1.26, or 1.21+ fetching 1.26 (HAMi's go.mod asks for 1.26 too)
        go, toolchain = cpbuild.find_go()
    except cpbuild.BuildError as err:
        raise BuildError(f"building HAMi's scheduler: {err}") from err
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"scheduler.tmp{os.getpid()}")
    # The checkout may be read-only: go build writes only the output and the caches.
    try:
        run = subprocess.run(
            [go, "build", "-o", str(tmp), "./cmd/scheduler"],
            cwd=src, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False,
            env={**os.environ, "GOTOOLCHAIN": toolchain},
        )  # fmt: skip
    except subprocess.TimeoutExpired as err:
        raise BuildError(f"go build ./cmd/scheduler in {src} took over {BUILD_TIMEOUT_S:g}s") from err
    if run.returncode != 0:
        raise BuildError(f"go build ./cmd/scheduler in {src} failed:\n{run.stderr[-4000:]}")
    tmp.replace(out)
    return out


@dataclass(frozen=True)
class ChartSetup:
    """The extender container of HAMi's chart: its flags (after the binary), literal env, device
    config; and kube-scheduler's KubeSchedulerConfiguration."""

    flags: tuple[str, ...]
    env: Mapping[str, str]
    device_config: str
    scheduler_config: Mapping[str, Any]


def _docs(rendered: Mapping[str, str], suffix: str) -> list[dict[str, Any]]:
    path = next(p for p in rendered if p.endswith(suffix))
    return [d for d in yaml.safe_load_all(rendered[path]) if d]


def chart_setup(src: Path, values: Mapping[str, Any] | None = None) -> ChartSetup:
    with helm.Chart.load(src / "charts" / "hami") as chart:
        rendered = chart.render(dict(values or {}), name=RELEASE, namespace=NAMESPACE, is_install=True)
    deployment = _docs(rendered, "templates/scheduler/deployment.yaml")[0]
    containers = deployment["spec"]["template"]["spec"]["containers"]
    ext = next(c for c in containers if c["name"] == EXTENDER_CONTAINER)
    env = {e["name"]: str(e["value"]) for e in ext.get("env", []) if "value" in e}
    device_cm = _docs(rendered, "templates/scheduler/device-configmap.yaml")[0]
    sched_cm = _docs(rendered, "templates/scheduler/configmap.yaml")[0]
    return ChartSetup(
        flags=tuple(ext["command"][1:]),
        env=env,
        device_config=device_cm["data"]["device-config.yaml"],
        scheduler_config=yaml.safe_load(sched_cm["data"]["config.yaml"]),
    )


def flags_for(setup: ChartSetup, http: str, metrics: str, device_config: Path,
              verbosity: int | None = None) -> list[str]:  # fmt: skip
    """The chart's flags with the listeners, the device config file and (if given) ``-v`` replaced."""
    keep = [
        f for f in setup.flags
        if f.split("=", 1)[0] not in OWN_FLAGS and not (verbosity is not None and re.match(r"-v=\d+$", f))
    ]  # fmt: skip
    own = [f"--http_bind={http}", f"--metrics-bind-address={metrics}"]
    own.append(f"--device-config-file={device_config}")
    return own + keep + ([f"-v={verbosity}"] if verbosity is not None else [])


@dataclass
class Extender:
    """One started extender: ``url`` (filter, bind, webhook) and ``metrics_url``."""

    name: str  # "hami" or "ours"
    child: Child
    url: str
    metrics_url: str
    flags: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.child.proc.pid

    def log_tail(self, chars: int = 4000) -> str:
        return log_tail(self.child.log, chars)


def start(
    which: str,
    group: ProcessGroup,
    kubeconfig: Path,
    setup: ChartSetup,
    *,
    binary: Path | None = None,
    verbosity: int | None = 2,
    extra_flags: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> Extender:
    """Starts ``which`` ("hami": ``binary``; "ours": ``python -m hami.scheduler``) with the chart's
    flags against the API of ``kubeconfig``, and waits until it answers on both listeners."""
    http, metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    device_config = group.log_dir / f"{which}-device-config.yaml"
    device_config.write_text(setup.device_config, encoding="utf-8")
    flags = [*flags_for(setup, http, metrics, device_config, verbosity), *extra_flags]
    if which == "hami":
        if binary is None:
            raise ValueError("starting HAMi's scheduler needs its binary (hamipeer.build)")
        argv = [str(binary), *flags]
    else:
        argv = [sys.executable, "-m", "hami.scheduler", f"--kubeconfig={kubeconfig}", *flags]
    # POD_NAME/POD_NAMESPACE as the chart's downward API sets them (leader labels, the Lease namespace).
    child_env = {
        **setup.env, "KUBECONFIG": str(kubeconfig), "POD_NAME": f"{which}-scheduler-0",
        "POD_NAMESPACE": NAMESPACE, **(env or {}),
    }  # fmt: skip
    child = group.start(f"{which}-scheduler", argv, env=child_env)
    ext = Extender(which, child, f"http://{http}", f"http://{metrics}", flags)
    wait_until(lambda: _answers(ext), 60.0, f"{which} scheduler listening", alive=group.check_alive,
               interval=0.1)  # fmt: skip
    return ext


class LeaseKeeper:
    """The leader Lease the chart's kube-scheduler sidecar holds (``leaderElection`` of its
    configuration), for runs without a real kube-scheduler: both extenders lead while its holder
    starts with their host name, and only while it is renewed."""

    RENEW_S, DURATION_S = 2.0, 15

    def __init__(self, api: str, name: str = "hami-scheduler", namespace: str = NAMESPACE,
                 session: requests.Session | None = None) -> None:  # fmt: skip
        self._url = f"{api}/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._session = session or requests.Session()
        self._name, self._namespace = name, namespace
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self.renew()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def renew(self) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lease = {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self._name, "namespace": self._namespace},
            "spec": {"holderIdentity": f"{socket.gethostname()}_kube-scheduler", "renewTime": now,
                     "leaseDurationSeconds": self.DURATION_S},
        }  # fmt: skip
        r = self._session.patch(f"{self._url}/{self._name}", json={"spec": lease["spec"]}, timeout=10,
                           headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
        if r.status_code == 404:
            r = self._session.post(self._url, json=lease, timeout=10)
        r.raise_for_status()

    def _run(self) -> None:
        while not self._stop.wait(self.RENEW_S):
            with contextlib.suppress(requests.RequestException):  # the API is stopping; the next try says
                self.renew()


def _answers(ext: Extender) -> bool:
    try:
        return (
            requests.get(ext.url + "/healthz", timeout=2).status_code == 200
            and requests.get(ext.metrics_url + "/metrics", timeout=5).status_code == 200
        )
    except requests.RequestException:
        return False
