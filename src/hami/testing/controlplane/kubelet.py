"""A real kubelet on this machine, on the real control plane: built from ``k8s.io/kubernetes`` at the
control plane's version (same module graph as ``build``, cached beside its binaries), running pods
through Debian's containerd and runc from a local image made of Debian's busybox-static (no
registry), with a device plugin's ``kubelet.sock`` in its own root directory.

    kubelet = RealKubelet(cp, workdir, node="kl-node")   # containerd, then kubelet; waits for Ready
    kubelet.plugin_dir                                   # where hami-device-plugin registers
    kubelet.stop()

``problem()`` says why it cannot run here (not root, no containerd/runc/busybox-static, no cgroup
memory/cpu controller), in one line, before anything is started.
docs/design/real-kubelet.md has what it needs and what was found.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from hami.testing.controlplane import build
from hami.testing.controlplane.run import ControlPlane
from hami.testing.processes import Child, free_port, log_tail
from hami.testing.wait import wait_until

Obj = dict[str, Any]
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static: one static binary, so an image of one file
PAUSE_IMAGE = "hami.local/pause:1"
BUSYBOX_IMAGE = "hami.local/busybox:1"
TOOLS = ("containerd", "runc", "ctr", "unshare")
READY_S = 240.0
DEVICE_PLUGINS = Path("/var/lib/kubelet/device-plugins")
LOOPBACK_CNI = Path("/usr/lib/cni/loopback")


def kubelet_path() -> Path:
    return build.cache_dir() / "kubelet" / "kubelet"


def ensure_kubelet(progress: build.Progress = build.to_stderr) -> Path:
    """The cached kubelet, built first (``go build k8s.io/kubernetes/cmd/kubelet`` in the control
    plane's module, so that it reuses its compiled packages) if it is not there."""
    path = kubelet_path()
    if os.access(path, os.X_OK):
        return path
    go, toolchain = build.find_go()
    path.parent.mkdir(parents=True, exist_ok=True)
    progress(f"building kubelet {build.K8S_VERSION} into {path.parent} (once)")
    with tempfile.TemporaryDirectory(prefix="build-", dir=path.parent) as tmp:
        work = Path(tmp)
        (work / "go.mod").write_text(build.go_mod(), encoding="utf-8")
        tools = build.TOOLS_GO.replace(")\n", '\t_ "k8s.io/kubernetes/cmd/kubelet"\n)\n')
        (work / "tools.go").write_text(tools, encoding="utf-8")
        (work / "etcd").mkdir()
        (work / "etcd" / "main.go").write_text(build.ETCD_MAIN, encoding="utf-8")
        build.run_go([go, "mod", "tidy"], work, "go mod tidy", progress, toolchain=toolchain)
        argv = [go, "build", "-v", "-ldflags", build.ldflags(), "-o", str(work / "kubelet"),
                "k8s.io/kubernetes/cmd/kubelet"]  # fmt: skip
        build.run_go(argv, work, "go build kubelet", progress, count=r"^\S+/\S+$", toolchain=toolchain)
        (work / "kubelet").rename(path)
    return path


def problem() -> str | None:
    """None when a kubelet can run pods here, else why not (one line, with what to do)."""
    if os.geteuid() != 0:
        return "a kubelet and containerd need root (they create cgroups, mounts and namespaces)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    missing += [str(p) for p in (BUSYBOX, LOOPBACK_CNI) if not p.exists()]
    if missing:
        return (
            f"missing {', '.join(missing)}: apt-get install containerd runc busybox-static "
            "containernetworking-plugins (scripts/system-deps.sh)"
        )
    controllers = _cgroup_controllers()
    absent = {"cpu", "memory", "pids"} - controllers
    if absent:
        return f"no cgroup controller {', '.join(sorted(absent))} here (found: {sorted(controllers)})"
    return None


def _cgroup_controllers() -> set[str]:
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    if v2.exists():
        return set(v2.read_text(encoding="utf-8").split())
    found = set()
    for line in Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines():
        if " - cgroup " in line:
            found |= set(line.rsplit(" ", 1)[-1].split(","))
    return found


# ---- a local image, no registry ----


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", mode: int = 0o644, **kw: Any) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    for k, v in kw.items():
        setattr(info, k, v)
    tar.addfile(info, io.BytesIO(data))


def oci_image(name: str, entrypoint: list[str]) -> bytes:
    """An OCI image layout (a tar ``ctr images import`` reads) of one layer: busybox-static as
    /bin/busybox with the applets the tests use linked to it."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
        for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "var", "var/run"):
            _add(t, d, mode=0o755, type=tarfile.DIRTYPE)
        _add(t, "bin/busybox", BUSYBOX.read_bytes(), mode=0o755)
        for applet in ("sh", "sleep", "cat", "env", "ls", "echo", "true"):
            _add(t, f"bin/{applet}", type=tarfile.SYMTYPE, linkname="busybox")
    blob = layer.getvalue()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [_digest(blob)]},
    }).encode()  # fmt: skip
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _digest(config),
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": _digest(blob),
                    "size": len(blob)}],
    }).encode()  # fmt: skip
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": _digest(manifest),
        "size": len(manifest), "annotations": {"io.containerd.image.name": name},
    }]}).encode()  # fmt: skip
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:
        _add(t, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add(t, "index.json", index)
        for data in (blob, config, manifest):
            _add(t, "blobs/sha256/" + _digest(data).removeprefix("sha256:"), data)
    return out.getvalue()


# ---- containerd and the kubelet ----


def containerd_config(root: Path, sock: Path) -> str:
    """containerd with its own root, state and socket, the CRI plugin on runc with cgroupfs, the
    local pause image, and CNI's loopback plugin only (pods here use the host's network)."""
    return f"""version = 2
root = "{root}/root"
state = "{root}/state"
[grpc]
  address = "{sock}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # the kubelet asks for negative OOM scores (-998 for the sandbox), which take CAP_SYS_RESOURCE;
  # where root lacks it (a sandboxed VM), runc's init dies on them: containerd raises them to its
  # own score (no test here depends on which pod the kernel's OOM killer picks)
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{root}/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
"""


def kubelet_config(cp: ControlPlane, sock: Path, port: int, healthz: int) -> Obj:
    assert cp.pki is not None
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(cp.pki.ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        # this machine mounts cgroup v1 (a hybrid layout); the kubelet refuses v1 unless told
        "failCgroupV1": False,
        "containerRuntimeEndpoint": f"unix://{sock}",
        "failSwapOn": False,
        "resolvConf": "",
        # a shared build machine: never evict for disk or memory, never garbage-collect the images
        "evictionHard": {"memory.available": "0%", "nodefs.available": "0%", "imagefs.available": "0%"},
        "imageGCHighThresholdPercent": 100,
        "enforceNodeAllocatable": [],
        "cgroupsPerQOS": True,
        "registerNode": True,
        "syncFrequency": "5s",
        "nodeStatusUpdateFrequency": "5s",
    }


class RealKubelet:
    def __init__(
        self,
        cp: ControlPlane,
        workdir: Path,
        node: str,
        *,
        labels: dict[str, str] | None = None,
        taints: Sequence[str] = (),
    ) -> None:
        self.cp, self.node = cp, node
        self.labels, self.taints = dict(labels or {}), list(taints)
        self.work = workdir
        # short paths: a Unix socket's path is limited to 107 bytes
        self.root = Path(tempfile.mkdtemp(prefix="hami-kl-"))
        self.sock = self.root / "containerd.sock"
        self.kubelet_root = self.root / "kubelet"
        # the kubelet's device plugin manager ignores --root-dir: this path is compiled in
        self.plugin_dir = DEVICE_PLUGINS
        self.containerd: Child | None = None
        self.kubelet: Child | None = None

    def start(self) -> None:
        binary = ensure_kubelet()
        (self.root / "net.d").mkdir(parents=True)
        (self.root / "net.d" / "10-loopback.conflist").write_text(json.dumps(
            {"cniVersion": "0.4.0", "name": "hami-loopback", "plugins": [{"type": "loopback"}]}
        ), encoding="utf-8")  # fmt: skip
        config = self.root / "containerd.toml"
        config.write_text(containerd_config(self.root, self.sock), encoding="utf-8")
        self.containerd = self.cp.procs.start("containerd", ["containerd", "--config", str(config)])
        wait_until(self.sock.exists, READY_S, "containerd's socket", interval=0.2)
        for name, entry in ((PAUSE_IMAGE, ["/bin/sleep", "2147483647"]), (BUSYBOX_IMAGE, ["/bin/sh"])):
            image = self.root / (name.rsplit("/", 1)[-1].replace(":", "-") + ".tar")
            image.write_bytes(oci_image(name, entry))
            subprocess.run(
                ["ctr", "--address", str(self.sock), "-n", "k8s.io", "images", "import", str(image)],
                check=True, capture_output=True, timeout=120,
            )  # fmt: skip
        kubeconfig = self.cp.kubeconfig_for(f"system:node:{self.node}", ["system:nodes"])
        kconfig = self.root / "kubelet.yaml"
        healthz = free_port()
        settings = kubelet_config(self.cp, self.sock, free_port(), healthz)
        kconfig.write_text(yaml.safe_dump(settings), encoding="utf-8")
        argv = [
            str(binary), "--config", str(kconfig), "--kubeconfig", str(kubeconfig),
            "--root-dir", str(self.kubelet_root), "--hostname-override", self.node, "--v", "2",
        ]  # fmt: skip
        if self.labels:
            argv.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in self.labels.items()))
        if self.taints:
            argv.append("--register-with-taints=" + ",".join(self.taints))
        self.kubelet = self.cp.procs.start("kubelet", argv)
        self.cp.wait_http(self.kubelet, f"http://127.0.0.1:{healthz}/healthz", "the kubelet's /healthz")
        wait_until(self.ready, READY_S, f"node {self.node} Ready", interval=1.0)

    def ready(self) -> bool:
        if self.kubelet is not None and not self.kubelet.alive():
            raise AssertionError(f"the kubelet exited:\n{log_tail(self.kubelet.log, 4000)}")
        with self.cp.session() as s:
            reply = s.get(f"{self.cp.url}/api/v1/nodes/{self.node}", timeout=30)
        if reply.status_code != 200:
            return False
        conditions = reply.json().get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def stop(self) -> None:
        """The kubelet, the pods' containers (their shims outlive containerd), containerd, then the
        mounts the kubelet and containerd left under the root directory, and the directory."""
        if self.kubelet is not None and self.kubelet in self.cp.procs.children:
            self.cp.stop_child(self.kubelet)
        ctr = ["ctr", "--address", str(self.sock), "-n", "k8s.io"]
        if self.containerd is not None and self.containerd.alive():
            listed = subprocess.run(
                [*ctr, "tasks", "ls", "-q"], capture_output=True, text=True, timeout=60, check=False
            )
            for task in listed.stdout.split():
                kill = [*ctr, "tasks", "kill", "-s", "SIGKILL", task]
                subprocess.run(kill, capture_output=True, timeout=60, check=False)
        if self.containerd is not None and self.containerd in self.cp.procs.children:
            self.cp.stop_child(self.containerd)
        for pid in _shims(self.sock):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text(encoding="utf-8").splitlines()]
        for target in reversed([m for m in mounts if m.startswith(str(self.root))]):
            subprocess.run(["umount", "-l", target], capture_output=True, timeout=60, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        # the kubelet's socket and checkpoint there: the next kubelet starts from a clean directory
        for leftover in DEVICE_PLUGINS.glob("*"):
            leftover.unlink(missing_ok=True)


def _shims(sock: Path) -> list[int]:
    """The containerd shims serving our containerd (``-address <sock>`` on their command line)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(sock).encode() in argv:
            found.append(int(proc.name))
    return found


def main() -> int:
    """``python -m hami.testing.controlplane.kubelet`` (``make control-plane-bin``): build it, print
    its path; exit 2 with the reason when it cannot be built."""
    try:
        print(ensure_kubelet())
    except build.BuildError as err:
        print(
            f"kubelet: cannot build k8s.io/kubernetes/cmd/kubelet {build.K8S_VERSION}: {err}", file=sys.stderr
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
