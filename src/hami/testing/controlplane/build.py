"""The real control plane's binaries, built once from the Go module proxy by name and pinned version,
into a cache keyed by those versions (``~/.cache/hami/controlplane/<versions>/bin``).

kube-apiserver, kube-scheduler and kubectl come from ``k8s.io/kubernetes`` (which, used as a
dependency, needs every ``k8s.io/*`` staging module replaced by its matching ``v0.x`` tag); etcd comes
from ``go.etcd.io/etcd/server/v3`` at the version Kubernetes itself pins (kubeadm's
``DefaultEtcdVersion``) and its etcd client already uses, so all four share one module graph and one
build. A generated ``go.mod`` in a temporary directory, ``go mod tidy``, then one ``go build``.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

K8S_VERSION = "v1.37.2"
STAGING_VERSION = "v0.37.2"  # the k8s.io/* staging modules' tag for K8S_VERSION
ETCD_VERSION = "v3.7.0"  # kubeadm's DefaultEtcdVersion in K8S_VERSION, and its etcd client's version
GO_MIN = (1, 26)  # k8s.io/kubernetes v1.37's go.mod
STAGING = (
    "api", "apiextensions-apiserver", "apimachinery", "apiserver", "cli-runtime", "client-go",
    "cloud-provider", "cluster-bootstrap", "code-generator", "component-base", "component-helpers",
    "controller-manager", "cri-api", "cri-client", "cri-streaming", "csi-translation-lib",
    "dynamic-resource-allocation", "endpointslice", "externaljwt", "kms", "kube-aggregator",
    "kube-controller-manager", "kube-proxy", "kube-scheduler", "kubectl", "kubelet", "metrics",
    "mount-utils", "pod-security-admission", "sample-apiserver", "sample-cli-plugin",
    "sample-controller", "streaming",
)  # fmt: skip
COMMANDS = ("kube-apiserver", "kube-scheduler", "kubectl")
BINARIES = ("etcd", *COMMANDS)
BUILD_TIMEOUT_S = 3 * 3600.0  # a cold build is about half an hour on 2 cores; hung is far beyond that
Progress = Callable[[str], None]


class BuildError(RuntimeError):
    """A binary cannot be built; the message says which step, why, and what to do."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path
    kubectl: Path

    @classmethod
    def under(cls, bin_dir: Path) -> Binaries:
        return cls(*(bin_dir / name for name in BINARIES))

    def all(self) -> tuple[Path, ...]:
        return (self.etcd, self.kube_apiserver, self.kube_scheduler, self.kubectl)


def cache_root() -> Path:
    override = os.environ.get("HAMI_CONTROL_PLANE_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "hami" / "controlplane"


def cache_dir() -> Path:
    return cache_root() / f"kubernetes-{K8S_VERSION}-etcd-{ETCD_VERSION}"


def cached() -> Binaries | None:
    """The cached binaries, or None when they have not been built (completely) yet."""
    bins = Binaries.under(cache_dir() / "bin")
    done = cache_dir() / "bin" / ".complete"
    return bins if done.exists() and all(os.access(p, os.X_OK) for p in bins.all()) else None


def go_mod() -> str:
    replaces = "\n".join(f"\tk8s.io/{m} => k8s.io/{m} {STAGING_VERSION}" for m in STAGING)
    return (
        "module hami.local/controlplane\n\ngo 1.26.0\n\n"
        f"require (\n\tk8s.io/kubernetes {K8S_VERSION}\n\tgo.etcd.io/etcd/server/v3 {ETCD_VERSION}\n)\n\n"
        f"replace (\n{replaces}\n)\n"
    )


TOOLS_GO = (
    "//go:build tools\n\npackage tools\n\nimport (\n"
    + "".join(f'\t_ "k8s.io/kubernetes/cmd/{c}"\n' for c in COMMANDS)
    + ")\n"
)
ETCD_MAIN = (
    "// etcd's own main, from the pinned server module.\npackage main\n\n"
    'import (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\n'
    "func main() { etcdmain.Main(os.Args) }\n"
)
# What `kube-apiserver --version` and `kubectl version` report (a build outside Kubernetes' own
# repository otherwise says v0.0.0-master).
_VERSION_PKG = "k8s.io/component-base/version"


def ldflags() -> str:
    major, minor = K8S_VERSION.lstrip("v").split(".")[:2]
    values = {"gitVersion": K8S_VERSION, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    return " ".join(f"-X {_VERSION_PKG}.{k}={v}" for k, v in values.items())


TOOLCHAIN_MIN = (1, 21)  # the first Go that fetches the toolchain a go.mod asks for (GOTOOLCHAIN)


def find_go(
    minimum: tuple[int, int] = GO_MIN,
    what: str = "the control plane",
    needs: str = f"k8s.io/kubernetes {K8S_VERSION}",
) -> tuple[str, str]:
    """The Go toolchain and the GOTOOLCHAIN to run it with: ``local`` for Go ``minimum`` (1.26, the
    control plane's) or later; ``auto`` for Go 1.21 up to it, which then fetches the Go the generated
    go.mod asks for from the module proxy (golang.org/toolchain). BuildError saying what to install
    otherwise (``what`` is built from source, ``needs`` the Go it names)."""
    want = f"Go {minimum[0]}.{minimum[1]}"
    # PATH's first, then where scripts/system-deps.sh unpacks one (Debian's 1.19 may be on PATH)
    found = [g for g in (shutil.which("go"), "/usr/local/go/bin/go") if g and os.access(g, os.X_OK)]
    if not found:
        raise BuildError(
            f"no Go toolchain: {what} is built from source with {want} or later; install it "
            "from https://go.dev/dl (or run scripts/system-deps.sh as root) and put `go` on PATH"
        )
    seen = []
    for go in dict.fromkeys(found):
        env = {**os.environ, "GOTOOLCHAIN": "local"}
        out = subprocess.run(
            [go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60, check=False, env=env
        )
        m = re.match(r"go(\d+)\.(\d+)", out.stdout.strip())
        version = (int(m[1]), int(m[2])) if m else (0, 0)
        if version >= minimum:
            return go, "local"
        if version >= TOOLCHAIN_MIN:
            return go, "auto"
        seen.append(f"{go} is {out.stdout.strip() or 'unusable: ' + out.stderr.strip()}")
    raise BuildError(f"{'; '.join(seen)}; {needs} needs {want} or later (https://go.dev/dl)")


def _go_env(toolchain: str = "local") -> dict[str, str]:
    # GOTOOLCHAIN: see find_go; -mod=mod: the generated go.mod is completed by `go mod tidy`, nothing
    # is vendored
    return {**os.environ, "GOTOOLCHAIN": toolchain, "GOFLAGS": "-mod=mod -buildvcs=false"}


_NETWORK = re.compile(r"dial tcp|no such host|i/o timeout|connection refused|TLS handshake|proxyconnect")


def run_go(
    argv: list[str], cwd: Path, step: str, progress: Progress, *, count: str | None = None, toolchain: str
) -> None:
    """Runs one go command, printing a progress line every 30 s (lines matching ``count`` counted)."""
    started = time.monotonic()
    lines: list[str] = []
    proc = subprocess.Popen(
        argv, cwd=cwd, env=_go_env(toolchain), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    done = threading.Event()

    def report() -> None:
        while not done.wait(30.0):
            n = sum(1 for line in lines if count and re.search(count, line))
            what = f", {n} packages compiled" if count else ""
            progress(f"  {step}: {time.monotonic() - started:.0f} s{what}")

    ticker = threading.Thread(target=report, daemon=True)
    ticker.start()
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
        code = proc.wait(timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    finally:
        done.set()
    if code != 0:
        tail = "\n".join(lines[-30:])
        if _NETWORK.search(tail):
            proxy = _go_env().get("GOPROXY") or "Go's default"
            raise BuildError(
                f"{step} failed: the Go module proxy cannot be reached (GOPROXY={proxy}); "
                f"check the network or set GOPROXY to a reachable proxy. go said:\n{tail}"
            )
        raise BuildError(f"{step} failed (exit {code}); its last lines:\n{tail}")
    progress(f"  {step}: done in {time.monotonic() - started:.0f} s")


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    """One build at a time per cache (parallel test sessions wait for the first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def ensure(progress: Progress = to_stderr) -> Binaries:
    """The cached binaries, built first if they are not there yet."""
    found = cached()
    if found is not None:
        return found
    with _lock(cache_root() / ".build.lock"):
        found = cached()  # built by whoever held the lock before us
        if found is not None:
            return found
        return _build(progress)


def _build(progress: Progress) -> Binaries:
    go, toolchain = find_go()
    target = cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    progress(
        f"building kube-apiserver, kube-scheduler, kubectl {K8S_VERSION} and etcd {ETCD_VERSION} into "
        f"{target} (once; about 30 minutes on 2 cores with a cold Go build cache)"
    )
    with tempfile.TemporaryDirectory(prefix="build-", dir=target) as tmp:
        work = Path(tmp)
        (work / "go.mod").write_text(go_mod(), encoding="utf-8")
        (work / "tools.go").write_text(TOOLS_GO, encoding="utf-8")
        (work / "etcd").mkdir()
        (work / "etcd" / "main.go").write_text(ETCD_MAIN, encoding="utf-8")
        run_go([go, "mod", "tidy"], work, "go mod tidy (module downloads)", progress, toolchain=toolchain)
        out = work / "bin"
        out.mkdir()
        pkgs = ["./etcd", *(f"k8s.io/kubernetes/cmd/{c}" for c in COMMANDS)]
        argv = [go, "build", "-v", "-ldflags", ldflags(), "-o", str(out) + "/", *pkgs]
        run_go(argv, work, "go build", progress, count=r"^\S+/\S+$", toolchain=toolchain)
        for name in BINARIES:
            version = ["version", "--client"] if name == "kubectl" else ["--version"]
            check = subprocess.run(
                [str(out / name), *version], capture_output=True, text=True, timeout=60, check=False
            )
            if check.returncode != 0:
                raise BuildError(f"the built {name} does not run: {check.stdout}{check.stderr}")
        # what they were built from
        (out / "go.mod").write_text((work / "go.mod").read_text(encoding="utf-8"), encoding="utf-8")
        (out / ".complete").write_text(f"{K8S_VERSION} {ETCD_VERSION}\n", encoding="utf-8")
        final = target / "bin"
        if final.exists():
            shutil.rmtree(final)
        out.rename(final)
    progress(f"control plane binaries ready in {target / 'bin'}")
    return Binaries.under(target / "bin")
