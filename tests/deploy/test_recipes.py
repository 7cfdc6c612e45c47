"""Every command of the guides, as docs/guides/recipes.md lists it, run for real: `kubectl` (built
from the same Kubernetes version as the server) and `jq`, `curl`, `bash`, `go tool pprof`, against
the real control plane (``hami.testing.controlplane``) loaded with the rendered chart by `kubectl
apply`, with the real extender and device plugin running as the pods' containers, so `kubectl logs`
reads what they wrote (through kube-apiserver's kubelet call). A command that stops matching fails
its row."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from hami.core import annotations as ann
from hami.core import names
from hami.core.codec.handshake import format_requesting
from hami.core.profiling.heap import DEFAULT_WINDOW_S
from hami.testing import builders, certs, chart, cluster, install
from hami.testing.controlplane import Binaries, ControlPlane
from hami.testing.controlplane.deploy import PROVIDED_TLS, run_workloads
from hami.testing.kubeapi.logs import log_path
from hami.testing.processes import ProcessGroup, free_port, http_ok, untranslated
from hami.testing.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "docs" / "guides" / "recipes.md"
GUIDE = ROOT / "docs" / "guides" / "scheduler-debugging.md"
GPU_NODE, CPU_NODE = "gpu-node-01", "cpu-node-01"
PENDING = "train-1"  # a GPU pod in `default`, as the guides' namespace-less commands expect
_EVENT_WORDS = ("CardInsufficientMemory", "no available node")
TOOLS = ("jq", "curl", "go", "bash", "python3")  # kubectl: the control plane's own

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        any(shutil.which(t) is None for t in TOOLS), reason=f"needs {', '.join(TOOLS)} (make sysdeps)"
    ),
]


@dataclass(frozen=True)
class Recipe:
    id: str
    command: str
    check: str


def _cells(line: str) -> list[str]:
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def recipes() -> list[Recipe]:
    out = []
    for line in RECIPES.read_text(encoding="utf-8").splitlines():
        if not re.match(r"^\| \d{3}-", line):
            continue
        rid, _guide, command, _reaches, check = _cells(line)
        out.append(Recipe(rid, command.strip("`"), check))
    return out


def batch_script() -> str:
    text = RECIPES.read_text(encoding="utf-8")
    return text.split("```bash\n", 1)[1].split("```", 1)[0]


GOCACHE = (
    subprocess.run(["go", "env", "GOCACHE"], capture_output=True, text=True, check=False).stdout.strip()
    if shutil.which("go")
    else ""
)
DEPLOYMENT = f"/apis/apps/v1/namespaces/{names.NAMESPACE}/deployments/{names.SCHEDULER_DEPLOYMENT}"


def _get(cp: ControlPlane, path: str) -> dict[str, Any] | None:
    """The object at ``path`` of the API (None when it is not there)."""
    with cp.session() as s:
        reply = s.get(cp.url + path, timeout=30)
    if reply.status_code == 404:
        return None
    reply.raise_for_status()
    found: dict[str, Any] = reply.json()
    return found


def _create(cp: ControlPlane, pod: dict[str, Any]) -> dict[str, Any]:
    with cp.session() as s:
        url = f"{cp.url}/api/v1/namespaces/{pod['metadata']['namespace']}/pods"
        reply = s.post(url, json=pod, timeout=30)
    assert reply.status_code == 201, reply.text
    created: dict[str, Any] = reply.json()
    return created


@dataclass
class Env:
    cp: ControlPlane
    work: Path
    kubeconfig: Path
    extender: str  # host:port of the extender's HTTPS listener (the pod IP's :443)
    metrics: str  # host:port of its metrics listener (pprof with --profiling)
    plugin_dir: Path
    plugin_pod: str
    ca_file: Path
    client_cert: Path
    client_key: Path
    device_config: Path

    def get(self, path: str) -> dict[str, Any] | None:
        return _get(self.cp, path)

    def run(self, command: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        assert self.cp.binaries is not None
        env = {
            "PATH": f"{self.cp.binaries.kubectl.parent}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(self.work),
            # Go 1.26 builds `go tool pprof` on first use: from the shared build cache, not an empty one
            # under this HOME (minutes on a loaded machine)
            "GOCACHE": GOCACHE,
            "KUBECONFIG": str(self.kubeconfig),
            "PPROF_TMPDIR": str(self.work / "pprof"),
            "EDITOR": str(self.work / "editor.py"),
        }
        return shell(["bash", "-c", command], env, stdin=stdin, timeout=120, cwd=self.work)


def shell(
    args: list[str], env: dict[str, str], stdin: str = "", timeout: float = 30, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a guide's command as the recipes do: its messages untranslated (the checks read bash's and
    kubectl's words), its output decoded as UTF-8 (the guides' scripts print Chinese)."""
    return subprocess.run(
        args,
        input=stdin,
        capture_output=True,
        encoding="utf-8",
        timeout=timeout,
        env=untranslated(env),
        cwd=cwd,
        check=False,
    )


def _rendered_device_config(store_cm: dict[str, Any], path: Path) -> Path:
    data = store_cm["data"]
    assert isinstance(data, dict)
    path.write_text(str(data[names.DEVICE_CONFIG_KEY]), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, control_plane_binaries: Binaries) -> Iterator[Env]:
    work = tmp_path_factory.mktemp("guides")
    logs = work / "pod-logs"
    (work / "pprof").mkdir()
    ca = certs.make_ca()
    ca_file = ca.write(work / "ca.crt")
    certs.issue(ca, "hami-scheduler.kube-system.svc", work / "tls.crt", work / "tls.key")
    certs.issue(ca, "kube-scheduler", work / "client.crt", work / "client.key")
    editor = work / "editor.py"
    editor.write_text(
        f"#!{sys.executable}\nimport sys, yaml\npath = sys.argv[-1]\n"
        "doc = yaml.safe_load(open(path, encoding='utf-8'))\n"
        "doc['spec']['template']['spec']['containers'][0]['args'].append('--v=4')\n"
        "yaml.safe_dump(doc, open(path, 'w', encoding='utf-8'))\n",
        encoding="utf-8",
    )
    editor.chmod(0o755)
    # its own control plane: the rows delete pods and rewrite the Deployment
    with ControlPlane(work / "controlplane", binaries=control_plane_binaries, pod_logs=logs) as cp:
        kubeconfig = cp.kubeconfig
        lock = {"hami.io/mutex.lock": "2025-06-13T09:09:00Z,default,gone"}
        nodes = [
            cp.create_node(builders.node(GPU_NODE, annotations=lock, labels={"gpu": "on"}), 40),
            cp.create_node(builders.node(CPU_NODE), 0),
        ]
        # The profiling guide's values: the extender with --profiling. The TLS Secrets are given
        # (cert-manager's kinds have no CRDs here).
        rendered = work / "hami.yaml"
        rendered.write_text(
            chart.render_text(
                [chart.EXAMPLES / "production.yaml"],
                ["scheduler.extender.extraArgs={--debug,-v=4,--profiling}", PROVIDED_TLS],
            ),
            encoding="utf-8",
        )
        cp.kubectl("apply", "-f", str(rendered))
        pods = run_workloads(cp, nodes)
        # The extender runs as the replica listed second (lists are ordered by name), and labels itself
        # the leader: the guide's `.items[0]` of app=hami-scheduler alone names the follower.
        scheduler_pod = max(pods[names.SCHEDULER_DEPLOYMENT], key=lambda p: str(p["metadata"]["name"]))
        follower_pod = min(pods[names.SCHEDULER_DEPLOYMENT], key=lambda p: str(p["metadata"]["name"]))
        plugin_pod = pods[names.DEVICE_PLUGIN_DAEMONSET][0]

        with cp.session() as s:
            path = f"/api/v1/namespaces/{names.NAMESPACE}/configmaps/{names.DEVICE_CONFIGMAP}"
            device_config = s.get(cp.url + path, timeout=30).json()
        config_file = _rendered_device_config(device_config, work / "device-config.yaml")
        procs = ProcessGroup(logs)
        ext_port, metrics_port, plugin_metrics = free_port(), free_port(), free_port()
        plugin_dir = work / "device-plugins"
        plugin_dir.mkdir()
        try:
            for pod, container in (
                (scheduler_pod, names.EXTENDER_CONTAINER),
                (follower_pod, names.EXTENDER_CONTAINER),
                (plugin_pod, names.DEVICE_PLUGIN_CONTAINER),
            ):
                log_path(logs, names.NAMESPACE, pod["metadata"]["name"], container).parent.mkdir(parents=True)
            # The extender, as the rendered pod runs it: its flags (on test ports and files) and
            # its downward-API environment; its output is the container's log. Without client
            # certificates (clientCA.enabled=false), as the profiling guide's commands need: Go's
            # bundled pprof sends none (test_pprof_behind_mutual_tls covers the default).
            procs.python(
                f"{names.NAMESPACE}_{scheduler_pod['metadata']['name']}/{names.EXTENDER_CONTAINER}",
                "hami.scheduler",
                [
                    f"--http_bind=127.0.0.1:{ext_port}",
                    f"--cert_file={work / 'tls.crt'}",
                    f"--key_file={work / 'tls.key'}",
                    f"--metrics-bind-address=127.0.0.1:{metrics_port}",
                    "--scheduler-name=hami-scheduler",
                    f"--device-config-file={config_file}",
                    f"--kubeconfig={kubeconfig}",
                    "--debug",
                    "-v=4",
                    "--profiling",
                ],
                env=install.downward_env(scheduler_pod, names.EXTENDER_CONTAINER),
            )
            # The other replica, a real follower: it follows kube-scheduler's Lease, whose holder (no
            # kube-scheduler sidecar here) is never this pod, so it only logs its start and keeps its
            # caches; its log is the one the guide's `.items[0]` reads.
            procs.python(
                f"{names.NAMESPACE}_{follower_pod['metadata']['name']}/{names.EXTENDER_CONTAINER}",
                "hami.scheduler",
                [
                    f"--http_bind=127.0.0.1:{free_port()}",
                    f"--cert_file={work / 'tls.crt'}",
                    f"--key_file={work / 'tls.key'}",
                    f"--metrics-bind-address=127.0.0.1:{free_port()}",
                    "--scheduler-name=hami-scheduler",
                    f"--device-config-file={config_file}",
                    f"--kubeconfig={kubeconfig}",
                    "--leader-elect=true",
                    f"--leader-elect-resource-name={names.SCHEDULER_DEPLOYMENT}",
                    f"--leader-elect-resource-namespace={names.NAMESPACE}",
                    f"--leader-elect-identity={follower_pod['metadata']['name']}",
                    "--debug",
                    "-v=4",
                ],
                env=install.downward_env(follower_pod, names.EXTENDER_CONTAINER),
            )
            spec = work / "fake-nvml.yaml"
            spec.write_text(yaml.safe_dump(cluster.fake_nvml_spec(2)), encoding="utf-8")
            node_config = work / "config.json"
            node_config.write_text('{"nodeconfig": []}\n', encoding="utf-8")
            procs.python(
                f"{names.NAMESPACE}_{plugin_pod['metadata']['name']}/{names.DEVICE_PLUGIN_CONTAINER}",
                "hami.deviceplugin",
                [
                    f"--node-name={GPU_NODE}",
                    "--nvml=fake",
                    f"--fake-nvml-spec={spec}",
                    f"--config-file={config_file}",
                    f"--node-config-file={node_config}",
                    f"--device-plugin-path={plugin_dir}",
                    "--kubelet-socket=",
                    f"--hook-path={work / 'hook'}",
                    f"--vgpu-lock-dir={work / 'vgpulock'}",
                    f"--mig-apply-lock={work / 'mig.lock'}",
                    f"--metrics-bind-address=127.0.0.1:{plugin_metrics}",
                    f"--kubeconfig={kubeconfig}",
                ],
                env=install.downward_env(plugin_pod, names.DEVICE_PLUGIN_CONTAINER),
            )
            wait_until(
                http_ok(f"http://127.0.0.1:{metrics_port}/readyz"),
                60,
                "the extender",
                alive=procs.check_alive,
            )
            wait_until(
                lambda: (
                    "hami.io/node-handshake"
                    in ((_get(cp, f"/api/v1/nodes/{GPU_NODE}") or {})["metadata"].get("annotations") or {})
                ),
                60,
                "the device plugin's registration and the scheduler's handshake",
                alive=procs.check_alive,
            )
            # The handshake is written to unregistered nodes too: wait until the extender has
            # decoded the plugin's registration, or the filter below may answer "node unregistered".
            wait_until(
                lambda: _schedulable(f"http://127.0.0.1:{metrics_port}", GPU_NODE),
                60,
                "the extender to see the GPU node registered",
                alive=procs.check_alive,
            )
            pending = _create(
                cp,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": PENDING, "namespace": "default"},
                    "spec": {
                        "schedulerName": "hami-scheduler",
                        "containers": [
                            {
                                "name": "main",
                                "image": "cuda",
                                "resources": {
                                    "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "900000"}
                                },
                            }
                        ],
                    },
                }
            )
            # kube-scheduler's call: no GPU has 900000 MiB.
            answer = requests.post(
                f"https://127.0.0.1:{ext_port}/filter",
                json={"Pod": pending, "NodeNames": [GPU_NODE]},
                verify=str(ca_file),
                timeout=30,
            )
            assert answer.status_code == 200 and answer.json()["FailedNodes"], answer.text
            # the recorder writes the pod's events in the background: all of them, before the rows run
            wait_until(
                lambda: (
                    {"CardInsufficientMemory", "no available node"}
                    <= {
                        w
                        for e in (_get(cp, "/api/v1/namespaces/default/events") or {})["items"]
                        for w in _EVENT_WORDS
                        if w in e["message"]
                    }
                ),
                30,
                "the extender's FilteringFailed events",
                alive=procs.check_alive,
            )
            yield Env(
                cp,
                work,
                kubeconfig,
                f"127.0.0.1:{ext_port}",
                f"127.0.0.1:{metrics_port}",
                plugin_dir,
                plugin_pod["metadata"]["name"],
                ca_file,
                work / "client.crt",
                work / "client.key",
                config_file,
            )
        finally:
            procs.stop()


def _fill(command: str, env: Env, rid: str) -> str:
    pod = env.plugin_pod if rid.startswith("001-") else PENDING
    return (
        command.replace("<node-name>", GPU_NODE)
        .replace("<pod-name>", pod)
        .replace("<namespace>", "default")
        .replace("<target-pod-name>", PENDING)
        .replace("<POD_IP>", env.extender)
        .replace("localhost:10251", env.metrics)
        .replace("seconds=30", "seconds=1")
        .replace("--seconds 120", "--seconds 1")
        .replace("/var/lib/kubelet/device-plugins/", f"{env.plugin_dir}/")
    )


Result = subprocess.CompletedProcess[str]


def _ok(*texts: str) -> Callable[[Result, Env], None]:
    def check(done: Result, _env: Env) -> None:
        assert done.returncode == 0, done.stderr
        for text in texts:
            assert text in done.stdout, (text, done.stdout[-3000:])

    return check


def _extender_arg(value: str) -> Callable[[Result, Env], None]:
    def check(done: Result, env: Env) -> None:
        assert done.returncode == 0, done.stderr
        deploy = env.get(DEPLOYMENT)
        assert deploy is not None
        first = deploy["spec"]["template"]["spec"]["containers"][0]
        assert first["name"] == names.EXTENDER_CONTAINER and value in first["args"]

    return check


def _restarted(done: Result, env: Env) -> None:
    assert done.returncode == 0, done.stderr
    deploy = env.get(DEPLOYMENT)
    assert deploy is not None
    assert "kubectl.kubernetes.io/restartedAt" in deploy["spec"]["template"]["metadata"]["annotations"]


# bash's two words for `Requesting_<date> <time>` in `$((...))`: a field of 08 or 09 (month, day,
# hour) is a bad octal number, any other time a syntax error; which one depends on the clock.
_ARITHMETIC_ERRORS = ("syntax error", "value too great for base")


def _handshake_arithmetic_failed(done: Result) -> bool:
    return "Requesting_" in done.stderr and any(e in done.stderr for e in _ARITHMETIC_ERRORS)


def _batch(done: Result, _env: Env) -> None:
    # The registration line matches; v2.10's `Requesting_<time>` handshake (the scheduler writes it
    # on every node) is not a number to subtract, and bash stops there.
    assert f"--- 节点: {CPU_NODE} ---\n  [WARNING] GPU 未注册" in done.stdout, done.stdout
    assert _handshake_arithmetic_failed(done), done.stderr
    assert "握手正常" not in done.stdout and "握手超时" not in done.stdout, done.stdout


def _schedulable(metrics_url: str, node: str) -> bool:
    text = requests.get(f"{metrics_url}/metrics", timeout=30).text
    return any(
        s.name == "hami_scheduler_node_schedulable"
        and s.labels == {"node": node, "reason": "ok"}
        and s.value == 1
        for family in text_string_to_metric_families(text)
        for s in family.samples
    )


def _pprof(kind: str) -> Callable[[Result, Env], None]:
    def check(done: Result, _env: Env) -> None:
        assert done.returncode == 0, done.stderr
        assert f"Type: {kind}" in done.stderr, done.stdout + done.stderr  # pprof's header goes to stderr
        assert "flat%" in done.stdout, done.stdout  # `top` answered

    return check


HEAP_STDIN = "top -cum 80\n"  # the heap rows' pprof session: cumulative, so callers show


def _heap(done: Result, env: Env) -> None:
    _pprof("inuse_space")(done, env)
    # --profiling traces nothing until asked: a plain heap request traces for the default window
    # and says so in the profile's duration (--profiling.heap-from-start is the start-up view)
    assert f"Duration: {DEFAULT_WINDOW_S}s" in done.stderr, done.stderr


def _device_plugin_gone(done: Result, env: Env) -> None:
    assert done.returncode == 0, done.stderr
    assert f'pod "{env.plugin_pod}" deleted' in done.stdout
    assert env.get(f"/api/v1/namespaces/{names.NAMESPACE}/pods/{env.plugin_pod}") is None


def _unlocked(done: Result, env: Env) -> None:
    assert done.returncode == 0, done.stderr
    node = env.get(f"/api/v1/nodes/{GPU_NODE}") or {}
    assert "hami.io/mutex.lock" not in (node["metadata"].get("annotations") or {})


def _logs_container(done: Result, env: Env) -> None:
    # As written kubectl refuses the trailing -v=5; without it, the container's log.
    assert done.returncode != 0 and "-v=5" not in done.stdout
    plain = env.run(f"kubectl logs -n kube-system {env.plugin_pod} -c device-plugin")
    assert plain.returncode == 0 and "Successfully registered annotation" in plain.stdout, plain.stdout


CHECKS: dict[str, Callable[[Result, Env], None]] = {
    "000-edit": _extender_arg("--v=4"),
    "000-patch": _extender_arg("--v=5"),
    "000-rollout-restart": _restarted,
    "000-describe": _ok("FilteringFailed", "hami-scheduler", "CardInsufficientMemory"),
    "000-scheduler-pod": _ok(),
    "000-logs-tail": _ok("hami-scheduler extender on"),
    "000-logs-pod": _ok(f"default/{PENDING}"),
    "000-logs-filtering": _ok("FilteringFailed default/train-1"),
    "000-annotations": _ok('"hami.io/node-nvidia-register"', '"hami.io/node-handshake"'),
    "000-register": _ok('"type":"NVIDIA'),
    "000-handshake": _ok("Requesting_"),
    "000-handshake-age": _ok("Handshake timestamp: Requesting_", "Current timestamp: "),
    "000-get-scheduler": _ok("READY", "Running", "hami-scheduler-"),
    # kube-apiserver writes quantities canonically (900000 -> 900k) and defaults requests to the limits
    "000-resources": _ok('"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"900k"}', '"requests":'),
    "000-scheduler-name": _ok("hami-scheduler"),
    "000-batch": _batch,
    "000-pprof-cpu": _pprof("cpu"),
    "000-pprof-heap": _heap,
    "000-pprof-goroutine": _pprof("goroutine"),
    "000-pprof-index": _ok("/debug/pprof/", "heap", "profile"),
    "000-app-logs": _ok("hami-scheduler extender on"),
    "000-pending": _ok(PENDING, "Pending"),
    "000-registered-column": _ok("GPU_REGISTERED", f"{CPU_NODE}   <none>", '"type":"NVIDIA'),
    "000-handshake-column": _ok("HANDSHAKE", "Requesting_"),
    "000-scheduler-config": _ok("schedulerName: hami-scheduler", "urlPrefix: https://127.0.0.1:443"),
    "001-annotations-jq": _ok('"key": "hami.io/node-nvidia-register"'),
    "001-lock": _ok("2025-06-13T09:09:00Z,default,gone"),
    "001-register-json": _ok('"devmem"', '"health": true'),
    "001-device-config": _ok("deviceSplitCount: 10", "deviceMemoryScaling: 1"),
    "001-socket": _ok("nvidia-gpu.sock"),
    "001-ds": _ok("hami-device-plugin", "hami-vgpu-monitor"),
    "001-logs": _ok("Successfully registered annotation"),
    "001-logs-container": _logs_container,
    "001-allocatable": _ok('"nvidia.com/gpu": "40"'),
    "001-unlock": _unlocked,
    "001-reregister": _device_plugin_gone,
    "001-annotations-all": _ok('"key": "hami.io/node-handshake"'),
    "001-node-yaml": _ok("allocatable:", "nvidia.com/gpu:"),
    "002-cpu": _pprof("cpu"),
    "002-heap": _heap,
    "002-allocs": _pprof("alloc_space"),
}
# Rows checked elsewhere, named in the table.
ELSEWHERE = {"002-values": "tests/deploy/test_chart.py", "003-values": "tests/deploy/test_chart.py"}


def test_every_row_has_a_check_or_a_reason() -> None:
    rows = recipes()
    ids = [r.id for r in rows]
    assert len(ids) == len(set(ids)), ids
    skipped = {r.id for r in rows if r.check.startswith("not run:")}
    assert set(ids) == set(CHECKS) | set(ELSEWHERE) | skipped
    for where in ELSEWHERE.values():
        assert (ROOT / where).exists(), where


@pytest.mark.parametrize("rid", [r.id for r in recipes() if r.id in CHECKS])
def test_recipe(rid: str, env: Env) -> None:
    recipe = next(r for r in recipes() if r.id == rid)
    command = _fill(recipe.command, env, rid)
    if "$SCHEDULER_POD" in command:
        command = (
            _fill(next(r for r in recipes() if r.id == "000-scheduler-pod").command, env, rid)
            + "; "
            + command
        )
    if rid == "000-batch":
        script = env.work / "check-node-annotations.sh"
        script.write_text(batch_script(), encoding="utf-8")
        command = command.replace("check-node-annotations.sh", str(script))
    CHECKS[rid](env.run(command, stdin=HEAP_STDIN if CHECKS[rid] is _heap else "top\n"), env)


def test_scheduler_pod_recipe_names_the_leader_of_two_replicas(env: Env) -> None:
    """Production runs two scheduler replicas; only the leader filters and logs. The recipe selects it
    by its role label, where the guide's `.items[0]` of app=hami-scheduler names the follower here."""
    role = ann.SCHEDULER_ROLE_LABEL

    def replicas() -> list[dict[str, Any]]:
        pods = (env.get(f"/api/v1/namespaces/{names.NAMESPACE}/pods") or {}).get("items") or []
        mine = [p for p in pods if p["metadata"].get("labels", {}).get("app") == names.SCHEDULER_APP]
        return sorted(mine, key=lambda p: str(p["metadata"]["name"]))

    assert len(replicas()) == 2
    wait_until(lambda: all(role in p["metadata"]["labels"] for p in replicas()), 60, "the role labels")
    first, second = (p["metadata"]["name"] for p in replicas())
    recipe = next(r for r in recipes() if r.id == "000-scheduler-pod").command
    leader = env.run(f'{recipe}; echo "$SCHEDULER_POD"')
    assert leader.stdout.strip() == second, leader.stdout + leader.stderr
    as_the_guide = env.run(recipe.replace(f",{role}=leader", "") + '; echo "$SCHEDULER_POD"')
    assert as_the_guide.stdout.strip() == first  # the follower, whose log has no filter lines
    logs = env.run(f"kubectl logs {first} -n kube-system")
    # Its own log, read: an empty answer from a failed `kubectl logs` would have no filter lines either.
    assert logs.returncode == 0, logs.stderr
    assert "hami-scheduler extender on " in logs.stdout, logs.stdout[-2000:]
    assert "FilteringFailed" not in logs.stdout


@pytest.mark.parametrize(
    "when",
    [
        datetime(2025, 6, 13, 7, 7, 40),  # syntax error
        datetime(2025, 6, 13, 8, 30, 0),  # hour 08: octal
        datetime(2025, 6, 13, 9, 59, 59),  # hour 09
        datetime(2025, 8, 13, 12, 0, 0),  # month 08
        datetime(2025, 9, 9, 23, 59, 59),  # month and day 09
        datetime(2025, 12, 31, 23, 59, 59),  # the year's last second
        datetime(2026, 1, 1, 0, 0, 0),
    ],
)
def test_batch_check_holds_at_any_time(when: datetime, tmp_path: Path) -> None:
    """The 000-batch check, on the guide's script with the handshake written at chosen times: the
    scheduler writes its local time, so which bash error the row sees depends on the clock."""
    handshake = format_requesting(when.replace(tzinfo=UTC), UTC)  # as written, in any zone
    kubectl = tmp_path / "kubectl"  # answers the script's three reads for one node
    kubectl.write_text(
        "#!/bin/bash\n"
        'case "$*" in\n'
        f"  *items*) echo {GPU_NODE} ;;\n"
        '  *register*) echo \'[{"id":"GPU-0"}]\' ;;\n'
        f"  *handshake*) echo '{handshake}' ;;\n"
        "esac\n",
        encoding="utf-8",
    )
    kubectl.chmod(0o755)
    script = tmp_path / "check-node-annotations.sh"
    script.write_text(batch_script(), encoding="utf-8")
    done = shell(["bash", str(script)], {"PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert f"--- 节点: {GPU_NODE} ---\n  [OK] GPU 已注册" in done.stdout, done.stdout
    assert _handshake_arithmetic_failed(done), done.stderr
    assert "握手正常" not in done.stdout and "握手超时" not in done.stdout, done.stdout


def guide_batch_script() -> str:
    """docs/guides/scheduler-debugging.md's corrected check-node-annotations.sh."""
    text = GUIDE.read_text(encoding="utf-8")
    return text.split("```bash\n#!/bin/bash\n# check-node-annotations.sh", 1)[1].split("```", 1)[0]


# (the handshake's instant, the zone the scheduler wrote it in, the reader's shell's TZ, the reader's
# SCHEDULER_TZ (None: the script's default, UTC)); summer and winter, either side of UTC.
ZONES = [
    (datetime(2026, 7, 15, 12, 0, tzinfo=UTC), "Europe/Berlin", "America/New_York", "Europe/Berlin"),
    (datetime(2026, 1, 15, 12, 0, tzinfo=UTC), "America/New_York", "Asia/Tokyo", "America/New_York"),
    (datetime(2026, 10, 25, 2, 30, tzinfo=UTC), "Europe/Berlin", "UTC", "Europe/Berlin"),  # just after
    (datetime(2026, 3, 8, 12, 0, tzinfo=UTC), "UTC", "Australia/Lord_Howe", None),
]


@pytest.mark.parametrize(("written", "zone", "reader_tz", "scheduler_tz"), ZONES)
@pytest.mark.parametrize(("age", "gpus", "verdict"), [(30, "4", "[OK] handshake 30s old"),
                                                      (90, "0", "[ERROR] handshake 90s old")])
def test_guide_batch_script_reads_the_handshake_in_the_schedulers_zone(
    *,
    written: datetime, zone: str, reader_tz: str, scheduler_tz: str | None,
    age: int, gpus: str, verdict: str, tmp_path: Path,
) -> None:
    """The guide's own script (GNU date), run in a shell whose zone is not the scheduler's: the
    handshake is read in SCHEDULER_TZ, so the age is right to the second. `date +%s` (now) is pinned
    to ``written + age``; `date -d` is the real one."""
    handshake = format_requesting(written, ZoneInfo(zone))
    real_date = shutil.which("date")
    assert real_date is not None
    (tmp_path / "date").write_text(
        "#!/bin/bash\n"
        f'if [ "$*" = "+%s" ]; then echo {int(written.timestamp()) + age}; else exec {real_date} "$@"; fi\n',
        encoding="utf-8",
    )
    (tmp_path / "kubectl").write_text(
        "#!/bin/bash\n"
        'case "$*" in\n'
        f"  *items*) echo {GPU_NODE} ;;\n"
        '  *register*) echo \'[{"id":"GPU-0"}]\' ;;\n'
        f"  *handshake*) echo '{handshake}' ;;\n"
        f"  *allocatable*) echo {gpus} ;;\n"
        "esac\n",
        encoding="utf-8",
    )
    for stub in ("date", "kubectl"):
        (tmp_path / stub).chmod(0o755)
    script = tmp_path / "check-node-annotations.sh"
    script.write_text(guide_batch_script(), encoding="utf-8")
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "TZ": reader_tz}
    if scheduler_tz is not None:
        env["SCHEDULER_TZ"] = scheduler_tz
    done = shell(["bash", str(script)], env)
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert f"--- node: {GPU_NODE} ---\n  [OK] GPUs registered\n  {verdict}" in done.stdout, done.stdout


def test_the_recipes_shell_is_untranslated_under_another_locale(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Started from a German session, the recipes' children still speak C and print UTF-8: the
    checks' parsers (bash's arithmetic errors, the guides' Chinese lines) hold."""
    for var, value in (("LANG", "de_DE.UTF-8"), ("LC_ALL", "de_DE.UTF-8"), ("LC_MESSAGES", "de_DE.UTF-8"),
                       ("LANGUAGE", "de:fr")):
        monkeypatch.setenv(var, value)
    said = shell(["bash", "-c", 'echo "$LC_ALL|$LANG|${LANGUAGE-unset}|${LC_MESSAGES-unset}|节点"'],
                 dict(os.environ))
    assert said.stdout == "C.UTF-8|C.UTF-8|unset|unset|节点\n", said.stdout
    handshake = format_requesting(datetime(2025, 6, 13, 8, 30, tzinfo=UTC), UTC)
    (tmp_path / "kubectl").write_text(
        f"#!/bin/bash\ncase \"$*\" in *items*) echo n ;; *handshake*) echo '{handshake}' ;; esac\n",
        encoding="utf-8",
    )
    (tmp_path / "kubectl").chmod(0o755)
    script = tmp_path / "check-node-annotations.sh"
    script.write_text(batch_script(), encoding="utf-8")
    done = shell(["bash", str(script)], {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert "--- 节点: n ---" in done.stdout, done.stdout
    assert _handshake_arithmetic_failed(done), done.stderr


def test_pprof_behind_mutual_tls(env: Env) -> None:
    """The chart's default: the extender's listener wants the chart CA's client certificate, and
    pprof sits behind it. Go's bundled pprof sends none (its own fetcher ignores -tls_cert), so
    the profiling guide's command is refused; curl with the certificate fetches the profile, and
    `go tool pprof` reads the file."""
    port, metrics = free_port(), free_port()
    procs = ProcessGroup(env.work / "mtls")
    procs.python(
        "extender",
        "hami.scheduler",
        [
            f"--http_bind=127.0.0.1:{port}",
            f"--cert_file={env.work / 'tls.crt'}",
            f"--key_file={env.work / 'tls.key'}",
            f"--client-ca-file={env.ca_file}",
            f"--metrics-bind-address=127.0.0.1:{metrics}",
            f"--device-config-file={env.device_config}",
            f"--kubeconfig={env.kubeconfig}",
            "--profiling",
        ],
    )
    try:
        wait_until(http_ok(f"http://127.0.0.1:{metrics}/readyz"), 60, "the extender", alive=procs.check_alive)
        as_written = env.run(
            f"go tool pprof https+insecure://127.0.0.1:{port}/debug/pprof/heap", stdin="top\n"
        )
        assert as_written.returncode != 0 and "Type:" not in as_written.stderr, as_written.stderr
        refused = ("certificate required", "reset", "EOF")  # TLS 1.3: the server closes after the handshake
        assert any(word in as_written.stderr for word in refused), as_written.stderr
        fetched = env.run(
            f"curl -sSf --cacert {env.ca_file} --cert {env.client_cert} --key {env.client_key} "
            f"-o heap.pb.gz https://127.0.0.1:{port}/debug/pprof/heap && go tool pprof heap.pb.gz",
            stdin=HEAP_STDIN,
        )
        _heap(fetched, env)
        refused = env.run(
            f"curl -sS --cacert {env.ca_file} -o /dev/null https://127.0.0.1:{port}/filter -d '{{}}'"
        )
        assert refused.returncode != 0  # /filter is behind the same certificate
    finally:
        procs.stop()
