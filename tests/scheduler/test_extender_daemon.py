"""The daemon as operators run it (``python -m hami.scheduler ...``): TLS on ``--http_bind`` with
certificate reload, and the klog lines of docs/guides/scheduler-debugging.md §3.2 at ``-v`` 2, 4 and 5 read
from its stderr."""

from __future__ import annotations

import gzip
import os
import re
import socket
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography.hazmat.primitives.serialization import Encoding

from hami.testing.builders import gpu_node, gpu_pod
from hami.testing.certs import issue, make_ca
from hami.testing.extender import SchedulerDaemon, daemon
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until

# docs/guides/scheduler-debugging.md §3.2: the -v=4 example lines and the grep recipes.
GUIDE_LINES = [
    "I0211 10:30:15.123456  1  filter.go:125] Filtering node gpu-node-01 for pod test-pod",
    "I0211 10:30:15.123789  1  filter.go:150] Node gpu-node-01 filtered out: CardInsufficientMemory, "
    "requested 8192Mi but available 4096Mi",
]
GUIDE_GREPS = ["test-pod", "FilteringFailed"]  # grep "<target-pod-name>", grep "FilteringFailed"
KLOG_HEADER = re.compile(r"^([IWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d{6}\s+\d+\s+[\w.]+:\d+\] ")


def _message(line: str) -> str:
    m = KLOG_HEADER.match(line)
    assert m is not None, f"not a klog line: {line!r}"
    return line[m.end() :]


def _seed_cluster(api: KubeAPIServer) -> dict[str, Any]:
    api.store.put(gpu_node("gpu-node-01", gpus=1, mem=4096))
    api.store.put(gpu_node("gpu-node-02", gpus=2, mem=16384))
    api.store.put(gpu_node("gpu-node-03", gpus=2, mem=16384))
    stored: dict[str, Any] = api.store.put(gpu_pod("test-pod", mem=8192))
    return stored


def _filter(d: SchedulerDaemon, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    r = requests.post(d.url + "/filter", json={"Pod": pod, "NodeNames": nodes}, timeout=30)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _lines_after(d: SchedulerDaemon, start: int, what: str) -> list[str]:
    """Log lines from ``start`` on, once a line containing ``what`` has arrived."""
    wait_until(lambda: any(what in line for line in d.lines[start:]), timeout=30, what=repr(what))
    return d.lines[start:]


def test_v4_verdict_lines_match_the_guide_and_its_greps_find_them(
    kube_api: KubeAPIServer, kube_config_file: Path
) -> None:
    pod = _seed_cluster(kube_api)
    with daemon(kube_config_file, "-v=4") as d:
        start = len(d.lines)
        reply = _filter(d, pod, ["gpu-node-01"])
        assert reply["FailedNodes"] == {"gpu-node-01": "1/1 CardInsufficientMemory"}
        lines = _lines_after(d, start, "Bindingfailed: CardInsufficientMemory on node gpu-node-01")
    messages = [_message(line) for line in lines]
    for example in GUIDE_LINES:
        assert _message(example) in messages  # the same text after the klog header
    verdicts = [line for line in lines if "filtered out" in line]
    assert verdicts and all(line.startswith("I") for line in verdicts)
    log = "\n".join(lines) + "\n"
    for pattern in GUIDE_GREPS:
        found = subprocess.run(["grep", pattern], input=log, capture_output=True, text=True, check=False)
        assert found.returncode == 0, f"grep {pattern!r} found nothing"
    failed = subprocess.run(
        ["grep", "FilteringFailed"], input=log, capture_output=True, text=True, check=True
    ).stdout
    assert "test-pod" in failed and "Bindingfailed: CardInsufficientMemory on node gpu-node-01" in failed
    assert re.search(r"^W.*FilteringFailed default/test-pod: ", failed, re.M)


def test_v2_logs_scores_but_not_verdicts_and_v5_traces(
    kube_api: KubeAPIServer, kube_config_file: Path
) -> None:
    pod = _seed_cluster(kube_api)
    names = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
    with daemon(kube_config_file, "-v=2") as d:
        start = len(d.lines)
        chosen = _filter(d, pod, names)["NodeNames"][0]
        lines = _lines_after(d, start, "chose node")
    scores = [_message(line) for line in lines if "chose node" in line]
    assert re.fullmatch(
        rf"pod test-pod: chose node {chosen}, scores gpu-node-0[23]:\d+\.\d\d, gpu-node-0[23]:\d+\.\d\d",
        scores[0],
    ), scores
    assert not [line for line in lines if "filtered out" in line or "Filtering node" in line]
    with daemon(kube_config_file, "-v=5") as d:
        start = len(d.lines)
        _filter(d, pod, names)
        lines = _lines_after(d, start, "chose node")
        messages = [_message(line) for line in lines]
        assert "filter pod default/test-pod over 3 nodes" in messages
        assert any(m.startswith("Node gpu-node-01 filtered out") for m in messages)
        assert any(
            m.startswith("node gpu-node-0") and "registered" in m for m in (_message(x) for x in d.lines)
        )


def test_default_verbosity_keeps_only_warnings_of_a_failed_filter(
    kube_api: KubeAPIServer, kube_config_file: Path
) -> None:
    pod = _seed_cluster(kube_api)
    with daemon(kube_config_file) as d:
        start = len(d.lines)
        _filter(d, pod, ["gpu-node-01"])
        lines = _lines_after(d, start, "Bindingfailed")
    assert not [line for line in lines if "Filtering node" in line or "chose node" in line]


def _served_der(url: str, ca_file: Path) -> bytes:
    host, port = url.removeprefix("https://").rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_tls_on_http_bind_with_certificate_reload(
    kube_api: KubeAPIServer, kube_config_file: Path, tmp_path: Path
) -> None:
    pod = _seed_cluster(kube_api)
    ca = make_ca()
    ca_file = ca.write(tmp_path / "ca.crt")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    first = issue(ca, "hami-scheduler", cert, key)
    with daemon(kube_config_file, f"--cert_file={cert}", f"--key_file={key}") as d:
        assert d.url.startswith("https://127.0.0.1:")
        assert not d.metrics_url.startswith("https")  # TLS is for the extender port only
        reply = requests.post(
            d.url + "/filter",
            json={"Pod": pod, "NodeNames": ["gpu-node-02"]},
            timeout=30,
            verify=str(ca_file),
        ).json()
        assert reply["NodeNames"] == ["gpu-node-02"]
        assert requests.get(d.url + "/healthz", timeout=10, verify=str(ca_file)).status_code == 200
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(d.url + "/healthz", timeout=10)  # not trusted without the CA
        plain = d.url.replace("https://", "http://")
        try:
            status = requests.get(plain + "/healthz", timeout=10).status_code
        except requests.exceptions.ConnectionError:
            status = 0
        assert status != 200  # no cleartext service on the TLS port
        assert _served_der(d.url, ca_file) == first.public_bytes(Encoding.DER)
        # cert-manager rotates the secret: the next handshake serves the new certificate.
        second = issue(ca, "hami-scheduler-rotated", cert, key)
        st = os.stat(cert)  # visible even on coarse-mtime filesystems
        os.utime(cert, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
        wait_until(
            lambda: _served_der(d.url, ca_file) == second.public_bytes(Encoding.DER),
            what="new cert",
            timeout=30,
        )
        assert requests.get(d.url + "/healthz", timeout=10, verify=str(ca_file)).status_code == 200
        wait_until(
            lambda: any("TLS certificate reloaded from" in line for line in d.lines),
            what="reload log",
            timeout=30,
        )


def test_profiling_traces_nothing_until_a_heap_profile_is_asked_for(
    kube_api: KubeAPIServer, kube_config_file: Path
) -> None:
    """--profiling alone mounts pprof and traces nothing (its price is nil until used); a heap
    request traces for its window only; --profiling.heap-from-start traces from start-up, so the
    caches built before the request show under the code that built them."""
    pod = _seed_cluster(kube_api)
    with daemon(kube_config_file, "--profiling") as d:
        assert _filter(d, pod, ["gpu-node-02"])["NodeNames"] == ["gpu-node-02"]
        index = d.metrics_url + "/debug/pprof/"
        assert "heap: not tracing" in requests.get(index, timeout=30).text
        heap = requests.get(d.metrics_url + "/debug/pprof/heap?seconds=1", timeout=120)
        assert heap.status_code == 200
        assert heap.headers["X-Heap-Window"].startswith("1s: allocations traced during the window")
        assert b"hami.scheduler.extender.daemon.Extender.start" not in gzip.decompress(heap.content)
        assert "heap: not tracing" in requests.get(index, timeout=30).text  # the window closed
    with daemon(kube_config_file, "--profiling", "--profiling.heap-from-start") as d:
        index = d.metrics_url + "/debug/pprof/"
        assert "heap: tracing every allocation since start-up" in requests.get(index, timeout=30).text
        heap = requests.get(d.metrics_url + "/debug/pprof/heap", timeout=120)
        assert heap.status_code == 200 and heap.headers["X-Heap-Window"].startswith("since start-up")
        assert b"hami.scheduler.extender.daemon.Extender.start" in gzip.decompress(heap.content)


def test_heap_from_start_without_profiling_is_a_usage_error(kube_config_file: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hami.scheduler", f"--kubeconfig={kube_config_file}",
         "--profiling.heap-from-start"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2
    assert "--profiling.heap-from-start needs --profiling" in done.stderr.splitlines()[-1]
